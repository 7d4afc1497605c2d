/**
 * The one place the engine imports @keepquant/tt-native (optional: the engine runs without it).
 * Imported by name at run time, once; the result (the module, or why it is unavailable) is cached.
 */
export type TtNative = typeof import("@keepquant/tt-native");

export type LoadedNative = { native: TtNative; reason?: undefined } | { native?: undefined; reason: string };

let loading: Promise<LoadedNative> | undefined;

/** @keepquant/tt-native when its CPU arm loads, else the reason it did not. */
export function loadTtNative(): Promise<LoadedNative> {
  loading ??= (async (): Promise<LoadedNative> => {
    try {
      const moduleName = "@keepquant/tt-native";
      const native = (await import(moduleName)) as TtNative;
      const status = native.nativeStatus();
      if (!native.nativeAddon()) return { reason: `CPU arm did not load: ${status.cpu.reasons.join("; ") || "unknown reason"}` };
      return { native };
    } catch (error) {
      return { reason: (error as Error).message };
    }
  })();
  return loading;
}
