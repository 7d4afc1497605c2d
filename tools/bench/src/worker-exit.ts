/** How a bench worker process ends: its result as one JSON line on stdout (exit 0), or its error on stderr (exit 1). */
export function exitWithResult(work: Promise<unknown>): void {
  work.then(
    (result) => {
      process.stdout.write(`${JSON.stringify(result)}\n`);
      process.exit(0);
    },
    (error: unknown) => {
      process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
      process.exit(1);
    },
  );
}
