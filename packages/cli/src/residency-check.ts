import { PlanError, checkCpuLoad, type CpuLoadCheck, type EngineMemoryOptions } from "@keepquant/engine";
import { write, type CommandIo } from "./command.js";

/**
 * Consults the residency planner for `cpu` before `Engine.load(modelPath, options)`: from the GGUF
 * header alone, against this machine's available memory. A model that does not fit is refused with
 * the planner's explanation (PlanError `PLAN_DOES_NOT_FIT`); with `force` the refusal becomes a
 * warning on stderr and the load goes on. `run`, `chat` and `serve` call it with the options they load with.
 */
export async function refuseUnlessFitsCpu(modelPath: string, options: EngineMemoryOptions, { force, io }: { force: boolean; io: CommandIo }): Promise<CpuLoadCheck> {
  const check = await checkCpuLoad(modelPath, options, { env: io.env });
  if (check.plan.fits) return check;
  if (!force) throw new PlanError("PLAN_DOES_NOT_FIT", `${check.explanation}. Pass --force to load anyway`, { field: "model" });
  write(io.stderr, `warning: PLAN_DOES_NOT_FIT: ${check.explanation}. Loading anyway (--force)`);
  return check;
}
