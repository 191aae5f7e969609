"""The runtime contract of an edgespec program: method names shared by exporter and runtimes.

The names of the autoregressive method and its metadata follow ExecuTorch's LLM runner,
so its stock `TextLLMRunner` runs an edgespec program unchanged. The Android core
mirrors this file (android/core/.../ProgramContract.java).
"""

FORWARD = "forward"  # (tokens int64 [1, T], input_pos int64 [1]) -> logits fp32 [1, V]

# metadata methods (constant methods: no inputs, one value)
GET_MAX_SEQ_LEN = "get_max_seq_len"
GET_MAX_CONTEXT_LEN = "get_max_context_len"
GET_VOCAB_SIZE = "get_vocab_size"
GET_BOS_ID = "get_bos_id"
GET_EOS_IDS = "get_eos_ids"
GET_N_LAYERS = "get_n_layers"
USE_KV_CACHE = "use_kv_cache"
USE_SDPA_WITH_KV_CACHE = "use_sdpa_with_kv_cache"
ENABLE_DYNAMIC_SHAPE = "enable_dynamic_shape"

METADATA_METHODS = (
    GET_MAX_SEQ_LEN,
    GET_MAX_CONTEXT_LEN,
    GET_VOCAB_SIZE,
    GET_BOS_ID,
    GET_EOS_IDS,
    GET_N_LAYERS,
    USE_KV_CACHE,
    USE_SDPA_WITH_KV_CACHE,
    ENABLE_DYNAMIC_SHAPE,
)
