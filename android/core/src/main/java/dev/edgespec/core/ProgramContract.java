package dev.edgespec.core;

/**
 * The runtime contract of an edgespec program: the method names the exporter writes and every
 * runtime calls. Mirrors sdk/edgespec/export/constants.py (a Python test checks they agree).
 *
 * <pre>
 * forward(tokens int64 [1, T], input_pos int64 [1]) -> logits fp32 [1, V]
 * next_token(tokens int64 [1, T], input_pos int64 [1]) -> token int64 [1]   (forward's argmax; quant.head_screen)
 * spec_step(last int64 [1], draft int64 [D, K], input_pos int64 [1], temperature fp32 [1],
 *           uniforms fp32 [R, K], gumbel fp32 [V]) -> (tokens int64 [D + 1], n int64 [1], draft int64 [D, K])
 * decode_rows(tokens int64 [1, T], slots int64 [T], positions int64 [T], emit int64 [E]) -> logits fp32 [E, V]
 * </pre>
 */
public final class ProgramContract {
  private ProgramContract() {}

  public static final String FORWARD = "forward";
  public static final String NEXT_TOKEN = "next_token";
  public static final String SPEC_STEP = "spec_step";
  public static final String DECODE_ROWS = "decode_rows";
  public static final String GET_BATCH_SLOTS = "get_batch_slots";

  public static final String GET_MAX_SEQ_LEN = "get_max_seq_len";
  public static final String GET_MAX_CONTEXT_LEN = "get_max_context_len";
  public static final String GET_VOCAB_SIZE = "get_vocab_size";
  public static final String GET_BOS_ID = "get_bos_id";
  public static final String GET_EOS_IDS = "get_eos_ids";
  public static final String GET_N_LAYERS = "get_n_layers";
  public static final String USE_KV_CACHE = "use_kv_cache";
  public static final String USE_SDPA_WITH_KV_CACHE = "use_sdpa_with_kv_cache";
  public static final String ENABLE_DYNAMIC_SHAPE = "enable_dynamic_shape";

  public static final String GET_SPEC_DEPTH = "get_spec_depth";
  public static final String GET_SPEC_TOPK = "get_spec_topk";
  public static final String GET_SPEC_TREE_SIZE = "get_spec_tree_size";
  public static final String GET_SPEC_BRANCHING = "get_spec_branching";
  public static final String GET_SPEC_PARENTS = "get_spec_parents";
  public static final String GET_SPEC_N_STREAMS = "get_spec_n_streams";
  public static final String GET_SPEC_LOSSLESS = "get_spec_lossless";

  // speech recognition programs (task: asr): forward(waveform [1, N]) or forward(features)
  public static final String GET_SAMPLE_RATE = "get_sample_rate";
  public static final String GET_HOP_LENGTH = "get_hop_length";
  public static final String GET_N_MELS = "get_n_mels";
  public static final String GET_MAX_SAMPLES = "get_max_samples";
  public static final String GET_TAKES_WAVEFORM = "get_takes_waveform";

  /** Bundle manifest schema this core reads (sdk/edgespec/bundle.py SCHEMA_VERSION). */
  public static final int SCHEMA_VERSION = 1;
}
