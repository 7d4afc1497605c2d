/** Hyperparameters of the qwen35 trunk as the forward needs them (qwen35.md section 2). */
export interface ModelConfig {
  /** Trunk layers (block_count - nextn_predict_layers). */
  readonly nLayer: number;
  /** D */
  readonly nEmbd: number;
  readonly nFf: number;
  /** H (query heads) */
  readonly nHead: number;
  /** Hkv */
  readonly nHeadKv: number;
  /** Dh (key_length = value_length) */
  readonly headDim: number;
  readonly eps: number;
  /** rope.dimension_count: NEOX rotation on the first nRot dims of each head */
  readonly nRot: number;
  readonly ropeFreqBase: number;
  /** ssm.conv_kernel */
  readonly convKernel: number;
  /** ssm.state_size: Dk = Dv */
  readonly ssmStateSize: number;
  /** ssm.group_count: Hk */
  readonly ssmGroupCount: number;
  /** ssm.time_step_rank: Hv */
  readonly ssmTimeStepRank: number;
  /** ssm.inner_size: Hv * Dv */
  readonly ssmInnerSize: number;
  /** is_recurrent(il) for il < nLayer */
  readonly recurrent: readonly boolean[];
  readonly nVocab: number;
}

export interface DerivedDims {
  readonly keyDim: number; // Hk * Dk
  readonly valueDim: number; // Hv * Dv
  readonly convDim: number; // 2 keyDim + valueDim
  readonly headVDim: number; // Dv
  readonly attentionLayers: number[];
  readonly gdnLayers: number[];
}

export function deriveDims(config: ModelConfig): DerivedDims {
  const keyDim = config.ssmGroupCount * config.ssmStateSize;
  const valueDim = config.ssmInnerSize;
  const attentionLayers: number[] = [];
  const gdnLayers: number[] = [];
  for (let il = 0; il < config.nLayer; il++) (config.recurrent[il] ? gdnLayers : attentionLayers).push(il);
  return {
    keyDim,
    valueDim,
    convDim: 2 * keyDim + valueDim,
    headVDim: valueDim / config.ssmTimeStepRank,
    attentionLayers,
    gdnLayers,
  };
}
