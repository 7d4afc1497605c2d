/**
 * A loaded vision projector: its plan checked against the language model, its weights bound (kept in
 * their GGUF encoding, memory-mapped with the native addon), the matmul provider of each weight type,
 * and the path from image bytes to an `EncodedImage` (decode, llama.cpp's resize and normalization,
 * the encoder).
 */
import {
  assertProjectorLoadable,
  GGML_TYPE_TRAITS,
  type GgmlType,
  type ProjectorConfig,
  projectorLoadPlan,
  readGguf,
} from "@keepquant/gguf";
import type { MatmulProvider } from "@keepquant/quant";
import { EngineError, EngineLoadError } from "../errors.js";
import { mappedTensorBytes, readTensorSource, type TensorBytes } from "../model/load.js";
import { loadTtNative } from "../model/native-module.js";
import { typescriptProviders } from "../model/providers.js";
import { VisionEncoderSpec, type VisionEncoderDims, type VisionInput, type VisionMatmul, type VisionOutput } from "./encoder/encoder.js";
import { NativeVisionEncoder, type VisionEncoder } from "./encoder/native.js";
import { bindVisionWeights } from "./encoder/weights.js";
import { preprocessImage } from "./image/image.js";
import type { ImageDecodeLimits } from "./image/decode.js";
import { type EncodedImage, imageHash } from "./media.js";

/** What a projector must agree with in the language model. */
export interface VisionLanguageModel {
  readonly architecture: string;
  readonly embeddingLength: number;
  readonly ropeSections: readonly number[];
}

export interface VisionRuntimeOptions {
  /** `auto`: the native matmul kernels when the addon loads; `ts`: the TypeScript reference. */
  provider: "auto" | "ts";
  threads?: number | undefined;
}

export class VisionRuntime {
  private constructor(
    readonly config: ProjectorConfig,
    private readonly encoder: VisionEncoder,
    /** the matmul provider per weight type (`stats().providers`) */
    readonly providers: Readonly<Record<string, string>>,
  ) {}

  /** Opens a projector file (or its bytes) for `language`; refuses a mismatched or unsupported one before any compute. */
  static async open(
    source: string | Uint8Array,
    language: VisionLanguageModel,
    options: VisionRuntimeOptions,
    diagnostics: string[],
  ): Promise<VisionRuntime> {
    if (!hasMultimodalRope(language.ropeSections)) {
      throw new EngineLoadError(
        "ENGINE_LOAD_REFUSED",
        `a ${language.architecture} model takes no images: it has no multimodal rotary sections`,
        { field: "projector" },
      );
    }
    const file = await readGguf(source);
    const plan = projectorLoadPlan(file, { embeddingLength: language.embeddingLength, architecture: language.architecture });
    assertProjectorLoadable(plan);
    const config = plan.config;
    if (config.ffnOp !== "gelu") {
      throw new EngineLoadError("ENGINE_LOAD_REFUSED", `projector FFN activation ${config.ffnOp} is not supported (gelu only)`, {
        field: "clip.use_gelu",
      });
    }
    let bytes: TensorBytes = readTensorSource(source);
    const candidates: MatmulProvider[] = [];
    let native: NonNullable<Awaited<ReturnType<typeof loadTtNative>>["native"]> | undefined;
    if (options.provider === "auto") {
      const loaded = await loadTtNative();
      native = loaded.native;
      if (loaded.native) {
        if (typeof source === "string") bytes = mappedTensorBytes(loaded.native.mapFile(source));
        const { createNativeMatmulProviders } = await import("../model/native-provider.js");
        candidates.push(...(await createNativeMatmulProviders("llama", options.threads, diagnostics)));
      } else {
        diagnostics.push(`vision: native CPU provider unavailable (${loaded.reason}); the TypeScript reference encodes images`);
      }
    }
    candidates.push(...typescriptProviders("llama", diagnostics));
    candidates.sort((a, b) => b.priority - a.priority);
    const deepstack = plan.description.deepstackLayers;
    const weights = await bindVisionWeights(file, bytes, config.blockCount, deepstack);
    const chosen = new Map<GgmlType, MatmulProvider>();
    const providerOf = (type: GgmlType): MatmulProvider => {
      let p = chosen.get(type);
      if (!p) {
        p = candidates.find((c) => c.supports(type));
        if (!p)
          throw new EngineLoadError(
            "ENGINE_UNSUPPORTED_TYPE",
            `no matmul provider computes ${GGML_TYPE_TRAITS[type].name} projector weights`,
            { field: "projector" },
          );
        chosen.set(type, p);
      }
      return p;
    };
    const matmul: VisionMatmul = (weight, x, m, y) => {
      providerOf(weight.type).matmulBTQuantGrouped({ x, xGroups: 1, m, weight, p: 1, out: y });
    };
    // every weight's provider is chosen now: an unsupported type fails the load, not the first image
    const matrices = [weights.patch[0], weights.patch[1], weights.mm0.weight, weights.mm2.weight];
    for (const l of weights.layers) {
      matrices.push(l.qkv.weight, l.out.weight, l.up.weight, l.down.weight);
      if (l.deepstack) matrices.push(l.deepstack.fc1.weight, l.deepstack.fc2.weight);
    }
    for (const w of matrices) providerOf(w.type);
    const dims: VisionEncoderDims = {
      patchSize: config.patchSize,
      hidden: config.hiddenSize,
      heads: config.headCount,
      ffn: config.feedForwardLength,
      eps: Math.fround(config.layerNormEps),
      merge: config.spatialMerge,
      projection: config.projectionDim,
      positionSide: config.positionGrid,
    };
    if (native) {
      // the whole encoder on the native thread pool: the specification's bits (its tests), off the JS thread
      return new VisionRuntime(config, new NativeVisionEncoder(dims, weights, native), {
        vision: `cpu-native-vision-${native.getNativeIsa()}`,
      });
    }
    const providers: Record<string, string> = { vision: "ts-spec" };
    for (const [type, p] of chosen) providers[`vision-${GGML_TYPE_TRAITS[type].name}`] = p.name;
    return new VisionRuntime(config, new VisionEncoderSpec(dims, weights, matmul), providers);
  }

  private inFlight = 0;
  private disposed = false;

  private async run(input: VisionInput): Promise<VisionOutput> {
    if (this.disposed) throw new EngineError("ENGINE_DISPOSED", "the vision projector is released");
    if (!(this.encoder instanceof NativeVisionEncoder)) return this.encoder.encode(input);
    this.inFlight++;
    try {
      return await this.encoder.encodeAsync(input);
    } finally {
      this.inFlight--;
      if (this.disposed && this.inFlight === 0) this.encoder.dispose();
    }
  }

  /** Releases the native encoder (once the encodes running on it are done). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    if (this.encoder instanceof NativeVisionEncoder && this.inFlight === 0) this.encoder.dispose();
  }

  /** Width of one image token (the language model's embedding length). */
  get outputWidth(): number {
    return this.encoder.outputWidth;
  }

  /** Decodes, resizes and normalizes an image as llama.cpp does for this projector, then encodes it. */
  async encode(bytes: Uint8Array, limits?: Partial<ImageDecodeLimits>): Promise<EncodedImage> {
    const c = this.config;
    const image = await preprocessImage(
      bytes,
      {
        patchSize: c.patchSize,
        spatialMerge: c.spatialMerge,
        imageMean: c.imageMean,
        imageStd: c.imageStd,
        minPixels: c.tokenLimits.minPixels,
        maxPixels: c.tokenLimits.maxPixels,
      },
      limits,
    );
    const { width, height } = image;
    // (height, width, 3) interleaved -> [3][height][width] planes
    const plane = width * height;
    const pixels = new Float32Array(3 * plane);
    for (let i = 0; i < plane; i++) {
      pixels[i] = image.pixels[3 * i]!;
      pixels[plane + i] = image.pixels[3 * i + 1]!;
      pixels[2 * plane + i] = image.pixels[3 * i + 2]!;
    }
    const out = await this.run({ pixels, width, height });
    return { embeddings: out.embeddings, tokens: out.tokens, gridWidth: out.gridWidth, gridHeight: out.gridHeight, hash: imageHash(bytes) };
  }
}

/** Whether rotary sections turn pairs with an image's rows and columns (h and w sections): text-only models have none. */
export function hasMultimodalRope(sections: readonly number[]): boolean {
  return (sections[1] ?? 0) > 0 || (sections[2] ?? 0) > 0;
}
