package dev.edgespec.core;

import java.util.List;
import java.util.Random;

/**
 * The host half of decoding, the same algorithm as edgespec.runtime.generate:
 *
 * <ul>
 *   <li>{@link #generate}: prefill the prompt in one {@code forward} call, then one token per call.
 *   <li>{@link #generateSpec}: prefill exactly as {@code generate}, sample the first token, then one
 *       {@code spec_step} per call: the program verifies the previous draft against the tree (greedy,
 *       or lossless rejection sampling fed with this loop's uniforms and Gumbel noise), compacts
 *       the KV cache to the accepted path and drafts the next tree. The host tracks the position
 *       (the last emitted token is not yet in the cache) and finishes autoregressively near the end
 *       of the context, where a tree no longer fits. With {@code lookup > 0} (the hybrid draft, a
 *       bundle's {@link Bundle#specLookup}) the continuation of the longest earlier match of the
 *       context's suffix ({@link SuffixMatcher}), when it is at least {@code lookup} tokens long,
 *       goes first at each depth of the draft: verification is exact, so only the speed changes.
 *       Under an {@link AdaptiveSpeculation} policy (the app's default) each call is a step only
 *       while speculation pays on this device, else one autoregressive token.
 * </ul>
 *
 * Greedy output of both is identical on the same program. Sampling uses java.util.Random, so a
 * seed reproduces within this runtime (not bit for bit the Python runtime's torch generator).
 */
public final class Decoder {
  /** Receives each emitted token as it is produced. */
  public interface TokenListener {
    void onToken(long token);
  }

  private Decoder() {}

  public static Generation generate(LanguageModel m, List<Long> prompt, int maxNewTokens, float temperature, long seed, TokenListener listener) {
    checkPrompt(prompt, m.maxSeqLen(), 0);
    int budget = Math.min(maxNewTokens, m.maxSeqLen() - prompt.size());
    Random rng = new Random(seed);
    Generation g = new Generation();
    long t0 = System.nanoTime();
    float[] logits = m.forward(toArray(prompt), 0);
    g.prefillNanos = System.nanoTime() - t0;
    long pos = prompt.size();
    long tDec = System.nanoTime();
    while (true) {
      long tok = Sampler.sample(logits, temperature, rng);
      if (isEos(tok, m.eosIds())) {
        g.stoppedByEos = true;
        break;
      }
      g.completion.add(tok);
      if (listener != null) listener.onToken(tok);
      if (g.completion.size() >= budget || pos >= m.maxSeqLen()) break;
      logits = m.forward(new long[] {tok}, pos);
      g.tokensPerCall.add(1);
      pos++;
    }
    g.decodeNanos = System.nanoTime() - tDec;
    return g;
  }

  public static Generation generateSpec(LanguageModel m, List<Long> prompt, int maxNewTokens, float temperature, long seed, int lookup, TokenListener listener) {
    return generateSpec(m, prompt, maxNewTokens, temperature, seed, lookup, null, listener);
  }

  /**
   * {@link #generateSpec} under an {@link AdaptiveSpeculation} policy (null: every call a
   * speculative step): each call is a step or one autoregressive token as the policy says, from
   * the measured cost of both on this device.
   */
  public static Generation generateSpec(
      LanguageModel m, List<Long> prompt, int maxNewTokens, float temperature, long seed, int lookup, AdaptiveSpeculation policy, TokenListener listener) {
    if (!m.hasSpec()) throw new IllegalArgumentException("the program has no speculative methods; use generate()");
    int depth = m.specDepth(), k = m.specTopK(), r = m.specTreeSize(), vocab = m.vocabSize();
    int room = r + depth; // slots one step may touch past its position
    checkPrompt(prompt, m.maxSeqLen(), room);
    int budget = Math.min(maxNewTokens, m.maxSeqLen() - prompt.size());
    Random rng = new Random(seed);
    float[] half = new float[r * k];
    java.util.Arrays.fill(half, 0.5f);
    float[] noNoise = new float[vocab];

    Generation g = new Generation();
    long t0 = System.nanoTime();
    float[] logits = m.forward(toArray(prompt), 0);
    g.prefillNanos = System.nanoTime() - t0;
    long tDec = System.nanoTime();
    long x = Sampler.sample(logits, temperature, rng);
    long[] fresh = {x};
    long pos = prompt.size(); // position of x, the last emitted token (not yet in the cache)
    long[] draft = placeholderDraft(depth, k);
    SuffixMatcher matcher = lookup > 0 ? new SuffixMatcher(prompt) : null;
    if (policy != null) policy.start(depth + 1);
    while (true) {
      for (long tok : fresh) {
        if (isEos(tok, m.eosIds())) {
          g.stoppedByEos = true;
          g.decodeNanos = System.nanoTime() - tDec;
          return g;
        }
        g.completion.add(tok);
        if (matcher != null) matcher.extend(tok);
        if (listener != null) listener.onToken(tok);
        if (g.completion.size() >= budget) {
          g.decodeNanos = System.nanoTime() - tDec;
          return g;
        }
      }
      if (pos >= m.maxSeqLen()) break;
      long[] continuation = matcher != null ? matcher.draft(depth, lookup) : new long[0];
      boolean fits = pos + room <= m.maxSeqLen();
      boolean speculative = fits && (policy == null || policy.speculate(continuation.length > 0));
      long tCall = System.nanoTime();
      if (speculative) {
        float[] uniforms = half, gumbel = noNoise;
        if (temperature > 0) {
          uniforms = new float[r * k];
          for (int i = 0; i < uniforms.length; i++) uniforms[i] = rng.nextFloat();
          gumbel = new float[vocab];
          for (int i = 0; i < vocab; i++) {
            double u = Math.min(Math.max(rng.nextDouble(), 1e-20), 1 - 1e-7);
            gumbel[i] = (float) -Math.log(-Math.log(u));
          }
        }
        if (matcher != null) draft = withLookup(draft, depth, k, continuation);
        LanguageModel.SpecStep s = m.specStep(x, draft, pos, temperature, uniforms, gumbel);
        fresh = s.tokens;
        draft = s.nextDraft;
      } else { // the policy's choice, or too close to the end of the context for a tree: one token per call
        fresh = new long[] {Sampler.sample(m.forward(new long[] {x}, pos), temperature, rng)};
      }
      if (policy != null && fits) {
        policy.record(speculative, System.nanoTime() - tCall, fresh.length, continuation.length > 0);
        g.adaptiveEvents = policy.events();
      }
      if (speculative) g.speculativeCalls++;
      g.tokensPerCall.add(fresh.length);
      pos += fresh.length;
      x = fresh[fresh.length - 1];
    }
    g.decodeNanos = System.nanoTime() - tDec;
    return g;
  }

  /** [depth, k] row-major: ids 0..k-1 at every depth (distinct siblings; verification rejects them). */
  public static long[] placeholderDraft(int depth, int k) {
    long[] d = new long[depth * k];
    for (int i = 0; i < d.length; i++) d[i] = i % k;
    return d;
  }

  /**
   * The [depth, k] row-major draft with a lookup continuation first at each depth it covers, the
   * draft's other candidates after it (distinct per depth, as lossless sampling needs).
   */
  public static long[] withLookup(long[] draft, int depth, int k, long[] continuation) {
    long[] out = draft.clone();
    for (int d = 0; d < Math.min(depth, continuation.length); d++) {
      long tok = continuation[d];
      int j = d * k;
      out[j++] = tok;
      for (int i = 0; i < k && j < (d + 1) * k; i++) {
        long t = draft[d * k + i];
        if (t != tok) out[j++] = t;
      }
    }
    return out;
  }

  static void checkPrompt(List<Long> prompt, int maxSeqLen, int reserve) {
    if (prompt.isEmpty()) throw new IllegalArgumentException("the prompt is empty");
    if (prompt.size() + reserve >= maxSeqLen) {
      throw new IllegalArgumentException(
          "the prompt has " + prompt.size() + " tokens but the program's context is " + maxSeqLen
              + (reserve > 0 ? " (" + reserve + " reserved for speculation)" : "") + "; shorten the prompt");
    }
  }

  private static boolean isEos(long tok, long[] eos) {
    for (long e : eos) if (e == tok) return true;
    return false;
  }

  private static long[] toArray(List<Long> xs) {
    long[] a = new long[xs.size()];
    for (int i = 0; i < a.length; i++) a[i] = xs.get(i);
    return a;
  }
}
