import { PlanError, checkCpuLoad, type CpuLoadCheck, type EngineMemoryOptions } from "@keepquant/engine";
import { GgufError } from "@keepquant/gguf";
import { write, type CommandIo } from "./command.js";

/**
 * Consults the residency planner for `cpu` before `Engine.load(modelPath, options)`: from the GGUF
 * header alone, against this machine's available memory. A model that does not fit is refused with
 * the planner's explanation (PlanError `PLAN_DOES_NOT_FIT`); with `force` the refusal becomes a
 * warning on stderr and the load goes on. A file the planner cannot read or plan is left to
 * `Engine.load`, which reports it the same way with or without this check (returns undefined).
 * `run`, `chat` and `serve` call it with the options they load with.
 */
export async function refuseUnlessFitsCpu(
  modelPath: string,
  options: EngineMemoryOptions,
  { force, io }: { force: boolean; io: CommandIo },
): Promise<CpuLoadCheck | undefined> {
  let check: CpuLoadCheck;
  try {
    check = await checkCpuLoad(modelPath, options, { env: io.env });
  } catch (error) {
    if (GgufError.isInstance(error)) return undefined;
    throw error;
  }
  if (check.plan.fits) return check;
  if (!force) throw new PlanError("PLAN_DOES_NOT_FIT", `${check.explanation}. Pass --force to load anyway`, { field: "model" });
  write(io.stderr, `warning: PLAN_DOES_NOT_FIT: ${check.explanation}. Loading anyway (--force)`);
  return check;
}
