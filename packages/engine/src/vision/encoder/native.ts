/**
 * The vision encoder on the CPU-native arm (@keepquant/tt-native's VisionEncoder: the whole encoder in C++,
 * multithreaded, off the JS thread when asked), and the selector that picks it when the addon is loaded and
 * the TypeScript specification (./encoder.ts) otherwise, saying which ran. The native encoder computes
 * exactly what VisionEncoderSpec computes with the native llama-numerics matmuls, bit for bit (native.test.ts).
 */
import { EngineError, EngineLoadError, EngineOptionError } from "../../errors.js";
import { loadTtNative, type TtNative } from "../../model/native-module.js";
import { typescriptProviders } from "../../model/providers.js";
import {
  providerMatmul,
  VisionEncoderSpec,
  type VisionEncoderDims,
  type VisionEncoderWeights,
  type VisionInput,
  type VisionMatmul,
  type VisionOutput,
} from "./encoder.js";

type NativeVisionEncoderHandle = import("@keepquant/tt-native").NativeVisionEncoderHandle;

/** The largest image side accepted, in pixels (the native arm's kVisionMaxSide). */
export const VISION_MAX_SIDE = 8192;
/** The largest patch count of one image (the native arm's kVisionMaxPatches): attention is quadratic in it. */
export const VISION_MAX_PATCHES = 65536;

/** What every vision encoder backend offers (VisionEncoderSpec has it too). */
export interface VisionEncoder {
  readonly dims: VisionEncoderDims;
  /** Output width of one image token: projection * (1 + deepstack layers). */
  readonly outputWidth: number;
  encode(input: VisionInput): VisionOutput;
}

/** The merged-token grid of an image, or a typed error naming what is wrong with it (checked before any work). */
export function checkVisionInput(dims: VisionEncoderDims, input: VisionInput): { gridWidth: number; gridHeight: number } {
  const { width, height, pixels } = input;
  const unit = dims.patchSize * dims.merge;
  for (const [name, side] of [
    ["width", width],
    ["height", height],
  ] as const) {
    if (!Number.isSafeInteger(side) || side < 1 || side > VISION_MAX_SIDE) {
      throw new EngineOptionError("ENGINE_BAD_REQUEST", `image ${name} ${side} is not an integer in [1, ${VISION_MAX_SIDE}]`, {
        field: `image.${name}`,
      });
    }
  }
  if (width % unit !== 0 || height % unit !== 0) {
    throw new EngineOptionError("ENGINE_BAD_REQUEST", `image ${width}x${height} is not a multiple of ${unit} pixels on each side`, {
      field: "image",
    });
  }
  const patches = (width / dims.patchSize) * (height / dims.patchSize);
  if (patches > VISION_MAX_PATCHES) {
    throw new EngineOptionError(
      "ENGINE_BAD_REQUEST",
      `image ${width}x${height} has ${patches} patches, more than ${VISION_MAX_PATCHES} (resize it)`,
      { field: "image" },
    );
  }
  if (!(pixels instanceof Float32Array) || pixels.length !== 3 * width * height) {
    const got = pixels instanceof Float32Array ? `got ${pixels.length}` : "got no Float32Array";
    throw new EngineOptionError(
      "ENGINE_BAD_REQUEST",
      `image pixels: expected ${3 * width * height} values for 3x${height}x${width}, ${got}`,
      { field: "image.pixels" },
    );
  }
  return { gridWidth: width / unit, gridHeight: height / unit };
}

/** The vision encoder in @keepquant/tt-native: the same contract as VisionEncoderSpec, plus an encode off the JS thread. */
export class NativeVisionEncoder implements VisionEncoder {
  readonly outputWidth: number;
  private handle: NativeVisionEncoderHandle | undefined;

  /** Throws EngineLoadError (ENGINE_BAD_MODEL) naming the field when the weights do not fit `dims`. */
  constructor(
    readonly dims: VisionEncoderDims,
    weights: VisionEncoderWeights,
    native: TtNative,
  ) {
    try {
      this.handle = native.createNativeVisionEncoder({ dims, ...weights });
    } catch (error) {
      const argument = (error as { argument?: unknown }).argument;
      throw new EngineLoadError("ENGINE_BAD_MODEL", `vision encoder: ${(error as Error).message}`, {
        field: typeof argument === "string" ? argument : undefined,
        cause: error,
      });
    }
    this.outputWidth = this.handle.outputWidth();
  }

  encode(input: VisionInput): VisionOutput {
    const { output, handle } = this.prepare(input);
    handle.encodeSync(input.pixels, input.width, input.height, output.embeddings);
    return output;
  }

  /** encode on the native thread pool, off the JS thread. */
  async encodeAsync(input: VisionInput): Promise<VisionOutput> {
    const { output, handle } = this.prepare(input);
    await handle.encode(input.pixels, input.width, input.height, output.embeddings);
    return output;
  }

  /** Releases the native encoder (the weights it borrowed); later calls throw. */
  dispose(): void {
    this.handle?.dispose();
    this.handle = undefined;
  }

  private prepare(input: VisionInput): { output: VisionOutput; handle: NativeVisionEncoderHandle } {
    const handle = this.handle;
    if (!handle) throw new EngineError("ENGINE_DISPOSED", "the native vision encoder is disposed");
    const { gridWidth, gridHeight } = checkVisionInput(this.dims, input);
    const tokens = gridWidth * gridHeight;
    const output = { embeddings: new Float32Array(tokens * this.outputWidth), tokens, gridWidth, gridHeight, width: this.outputWidth };
    return { output, handle };
  }
}

export interface VisionEncoderSelection {
  encoder: VisionEncoder;
  /** Which backend runs: `cpu-native-vision-<isa>` or `ts-spec` (the specification). */
  provider: string;
  /** Why the native encoder does not run, when it does not. */
  reason?: string;
}

export interface VisionEncoderOptions {
  /** "auto" (default): native when the addon is loaded, else the specification; "ts": the specification. */
  provider?: "auto" | "ts";
  /** The specification's matmuls (default: the TypeScript llama-numerics provider). */
  matmul?: VisionMatmul;
}

/** The specification's name as a vision provider. */
export const VISION_SPEC_PROVIDER = "ts-spec";

/**
 * The vision encoder to run: the native one when @keepquant/tt-native's CPU arm is loaded, else the
 * TypeScript specification, with the reason. Never a silent fallback: `provider` and `reason` say which ran.
 */
export async function selectVisionEncoder(
  dims: VisionEncoderDims,
  weights: VisionEncoderWeights,
  options: VisionEncoderOptions = {},
): Promise<VisionEncoderSelection> {
  const spec = (reason: string): VisionEncoderSelection => {
    const matmul = options.matmul ?? providerMatmul(typescriptProviders("llama", [])[0]!);
    return { encoder: new VisionEncoderSpec(dims, weights, matmul), provider: VISION_SPEC_PROVIDER, reason };
  };
  if (options.provider === "ts") return spec('provider "ts" was asked for');
  const { native, reason } = await loadTtNative();
  if (!native) return spec(`native vision encoder unavailable (${reason}); the TypeScript specification runs`);
  return { encoder: new NativeVisionEncoder(dims, weights, native), provider: `cpu-native-vision-${native.getNativeIsa()}` };
}
