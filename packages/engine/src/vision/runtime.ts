/**
 * A loaded vision projector: its plan checked against the language model, its weights bound (kept in
 * their GGUF encoding, memory-mapped with the native addon), the matmul provider of each weight type,
 * and the path from image bytes to an `EncodedImage` (decode, llama.cpp's resize and normalization,
 * the encoder).
 */
import { assertProjectorLoadable, GGML_TYPE_TRAITS, type ProjectorConfig, projectorLoadPlan, readGguf } from "@keepquant/gguf";
import { EngineError, EngineLoadError } from "../errors.js";
import { mappedTensorBytes, readTensorSource, type TensorBytes } from "../model/load.js";
import { loadTtNative } from "../model/native-module.js";
import { typescriptProviders } from "../model/providers.js";
import type { VisionEncoderDims, VisionEncoderWeights, VisionInput, VisionOutput } from "./encoder/encoder.js";
import { NativeVisionEncoder, selectVisionEncoder, type VisionEncoder } from "./encoder/native.js";
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
  /** `auto`: the native encoder when the addon loads (on its thread pool); `ts`: the TypeScript specification. */
  provider: "auto" | "ts";
}

export class VisionRuntime {
  private constructor(
    readonly config: ProjectorConfig,
    private readonly encoder: VisionEncoder,
    /** which encoder runs (`stats().providers.vision`) */
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
    const loaded = options.provider === "auto" ? await loadTtNative() : undefined;
    // memory-mapped with the addon (weights are views of the page cache), else read tensor by tensor
    const bytes: TensorBytes =
      loaded?.native && typeof source === "string" ? mappedTensorBytes(loaded.native.mapFile(source)) : readTensorSource(source);
    const weights = await bindVisionWeights(file, bytes, config.blockCount, plan.description.deepstackLayers);
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
    const selection = await selectVisionEncoder(dims, weights, { provider: options.provider });
    if (selection.reason && options.provider === "auto") diagnostics.push(`vision: ${selection.reason}`);
    if (!(selection.encoder instanceof NativeVisionEncoder)) checkSpecTypes(weights);
    return new VisionRuntime(config, selection.encoder, { vision: selection.provider });
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

/** The specification's matmuls (the TypeScript llama provider) take every matrix, or the load fails naming the type. */
function checkSpecTypes(weights: VisionEncoderWeights): void {
  const provider = typescriptProviders("llama", [])[0]!;
  const matrices = [weights.patch[0], weights.patch[1], weights.mm0.weight, weights.mm2.weight];
  for (const l of weights.layers) {
    matrices.push(l.qkv.weight, l.out.weight, l.up.weight, l.down.weight);
    if (l.deepstack) matrices.push(l.deepstack.fc1.weight, l.deepstack.fc2.weight);
  }
  const refused = matrices.find((w) => !provider.supports(w.type));
  if (refused) {
    throw new EngineLoadError(
      "ENGINE_UNSUPPORTED_TYPE",
      `no matmul provider computes ${GGML_TYPE_TRAITS[refused.type].name} projector weights`,
      {
        field: "projector",
      },
    );
  }
}
