"""The runtime contract of an edgespec program: method names shared by exporter and runtimes.

The names of the autoregressive method and its metadata follow ExecuTorch's LLM runner,
so its stock `TextLLMRunner` runs an edgespec program unchanged. The Android core
mirrors this file (android/core/.../ProgramContract.java).
"""

FORWARD = "forward"  # (tokens int64 [1, T], input_pos int64 [1]) -> logits fp32 [1, V]

# the greedy method (present when exported with quant.head_screen), sharing forward's KV cache:
# next_token(tokens int64 [1, T], input_pos int64 [1]) -> token int64 [1], the argmax of the
# logits forward would return (the same index), found from the head's screen without them
NEXT_TOKEN = "next_token"

# the speculative method (present when the bundle has streams), sharing forward's KV cache:
# spec_step(last int64 [1], draft int64 [D, K], input_pos int64 [1], temperature fp32 [1],
#           uniforms fp32 [R, K], gumbel fp32 [V]) -> (tokens int64 [D + 1], n int64 [1], draft int64 [D, K])
# After `forward` prefills the prompt, the first call takes the first generated token as
# `last` with a placeholder draft (distinct ids per depth, e.g. 0..K-1).
SPEC_STEP = "spec_step"

# the batched method (present when exported with export.batch_slots > 1), sharing forward's KV
# cache, whose slot 0 is forward's: decode_rows(tokens int64 [1, T], slots int64 [T],
# positions int64 [T], emit int64 [E]) -> logits fp32 [E, V]. Row t is at position positions[t]
# of the sequence in cache slot slots[t], writes its K/V there and sees that slot's keys
# [0, positions[t]]; emit names the rows whose logits come back. A sequence's rows give the
# bits they give alone (the block kernel's and the exact attention's rows are their own).
DECODE_ROWS = "decode_rows"
GET_BATCH_SLOTS = "get_batch_slots"  # sequences the cache holds side by side

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

# speculative metadata: tree depth D, top-K per depth, tree size R, branching per depth,
# parent of each tree node (breadth-first, -1 for the root), trained streams, mode
GET_SPEC_DEPTH = "get_spec_depth"
GET_SPEC_TOPK = "get_spec_topk"
GET_SPEC_TREE_SIZE = "get_spec_tree_size"
GET_SPEC_BRANCHING = "get_spec_branching"
GET_SPEC_PARENTS = "get_spec_parents"
GET_SPEC_N_STREAMS = "get_spec_n_streams"
GET_SPEC_LOSSLESS = "get_spec_lossless"

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

SPEC_METADATA_METHODS = (
    GET_SPEC_DEPTH,
    GET_SPEC_TOPK,
    GET_SPEC_TREE_SIZE,
    GET_SPEC_BRANCHING,
    GET_SPEC_PARENTS,
    GET_SPEC_N_STREAMS,
    GET_SPEC_LOSSLESS,
)

# --- speech recognition programs (task: asr) ---
# forward(waveform fp32 [1, N]) -> log_probs fp32 [1, T, V]        (get_takes_waveform true)
# forward(features fp32 [1, n_mels, F]) -> log_probs fp32 [1, T, V] (false: log-mel on the host)
# with F = 1 + N // hop and T = (F - 1) // 2 + 1; N at most get_max_samples.
GET_SAMPLE_RATE = "get_sample_rate"
GET_HOP_LENGTH = "get_hop_length"
GET_N_MELS = "get_n_mels"
GET_MAX_SAMPLES = "get_max_samples"
GET_TAKES_WAVEFORM = "get_takes_waveform"
ASR_METADATA_METHODS = (GET_SAMPLE_RATE, GET_HOP_LENGTH, GET_N_MELS, GET_MAX_SAMPLES, GET_TAKES_WAVEFORM, GET_VOCAB_SIZE)
