/**
 * One engine per model, shared by every call and loaded lazily: the first call of a model loads its
 * engine, concurrent first calls wait for the same load, later calls reuse it (the engine's scheduler
 * batches concurrent calls). A load that fails is not kept, so a later call tries again.
 */
import fs from "node:fs";
import path from "node:path";
import { assertCpuFits, Engine, isHubReference, resolveModelFile, type EngineOptions } from "@keepquant/engine";
import { ensureHubProjector } from "@keepquant/hub";
import { loadError, missingModelError } from "./errors.js";
import { engineOptionsOf, type KeepquantModelSettings } from "./settings.js";

/** The model id of the embedded default model (`@keepquant/default-model`). */
export const DEFAULT_MODEL_ID = "default";

/** A stable key for engine options that may hold functions (speculative `propose`): each function counts by identity. */
function optionsKey(options: EngineOptions, idOf: (fn: object) => number): string {
  return JSON.stringify(options, (_key, value: unknown) => (typeof value === "function" ? `[function ${idOf(value)}]` : value));
}

export class EngineRegistry {
  private readonly engines = new Map<string, Promise<Engine>>();
  private readonly functionIds = new WeakMap<object, number>();
  private nextFunctionId = 1;

  /**
   * The engine of `modelId` with `settings`, loading it on first use. Models of the same file and engine
   * options share one engine (settings that do not change the engine, such as chatTemplate, may differ).
   */
  engine(modelId: string, settings: KeepquantModelSettings): Promise<Engine> {
    const file = modelId === DEFAULT_MODEL_ID || isHubReference(modelId) ? modelId : path.resolve(modelId);
    const key = `${file}\u0000${optionsKey(engineOptionsOf(settings), (fn) => this.functionId(fn))}`;
    let loading = this.engines.get(key);
    if (!loading) {
      loading = loadEngine(modelId, file, settings);
      this.engines.set(key, loading);
      loading.catch(() => {
        if (this.engines.get(key) === loading) this.engines.delete(key);
      });
    }
    return loading;
  }

  private functionId(fn: object): number {
    let id = this.functionIds.get(fn);
    if (id === undefined) {
      id = this.nextFunctionId++;
      this.functionIds.set(fn, id);
    }
    return id;
  }

  /** How many engines are loaded or loading. */
  get size(): number {
    return this.engines.size;
  }

  /** Disposes every engine (their running calls end as aborted); later calls load them again. */
  async dispose(): Promise<void> {
    const loading = [...this.engines.values()];
    this.engines.clear();
    for (const result of await Promise.allSettled(loading)) if (result.status === "fulfilled") result.value.dispose();
  }
}

async function loadEngine(modelId: string, model: string, settings: KeepquantModelSettings): Promise<Engine> {
  const options = engineOptionsOf(settings);
  try {
    // an hf: projector: that repository's mmproj-*.gguf, fetched alone into the cache when missing
    if (options.projector !== undefined && isHubReference(options.projector)) {
      const { env, signal, onProgress } = options.hub ?? {};
      options.projector = await ensureHubProjector(options.projector, {
        ...(env === undefined ? {} : { env }),
        ...(signal instanceof AbortSignal ? { signal } : {}),
        ...(onProgress === undefined ? {} : { onProgress }),
      });
    }
    if (model === DEFAULT_MODEL_ID) return await Engine.loadDefault(options);
    // an hf: model is fetched into the Hugging Face cache when missing (settings.engine.hub: progress, abort, environment)
    const file = await resolveModelFile(model, options.hub);
    if (!fs.existsSync(file)) throw missingModelError(modelId, file);
    if (settings.checkFits !== false) await assertCpuFits(file, options, settings.memory ? { memory: settings.memory } : {});
    return await Engine.load(file, options);
  } catch (error) {
    throw loadError(modelId, error);
  }
}
