export { PlanError, type PlanErrorCode } from "./errors.js";
export {
  DEVICE_NAMES,
  TT_DEVICES,
  cpuAvailableMemory,
  cpuDevice,
  customDevice,
  isTtDeviceName,
  resolveDevice,
  ttDevice,
  type CpuMemory,
  type DeviceKind,
  type DeviceName,
  type PlanDevice,
  type TextFileReader,
  type TtDeviceName,
} from "./devices.js";
export {
  DECODE_STEP_PROGRAMS,
  KEEPQUANT_TT_TRACE_REGION_MB,
  TRACE_BYTES_PER_PROGRAM,
  planTraceRegion,
  type PlanWarning,
  type TraceRegion,
} from "./trace-region.js";
export {
  PLAN_DEFAULTS,
  RESIDENCY_POLICIES,
  formatGiB,
  planResidency,
  type ChunkPlaneInfo,
  type PlanModelSummary,
  type PlanSuggestion,
  type ResidencyClass,
  type ResidencyClassId,
  type ResidencyPlan,
  type ResidencyPlanInput,
  type PlanProjector,
  type ResidencyPolicy,
  type ResolvedPlanSettings,
} from "./residency.js";
export {
  ENGINE_MEMORY_DEFAULTS,
  assertCpuFits,
  checkCpuLoad,
  planEngineResidency,
  type CpuLoadCheck,
  type EngineMemoryOptions,
} from "./engine-plan.js";
