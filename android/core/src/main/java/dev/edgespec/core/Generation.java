package dev.edgespec.core;

import java.util.ArrayList;
import java.util.List;

/** A finished generation and its statistics (decode calls, tokens per call, timings). */
public final class Generation {
  public final List<Long> completion = new ArrayList<>();
  public final List<Integer> tokensPerCall = new ArrayList<>();
  public boolean stoppedByEos;
  public long prefillNanos;
  public long decodeNanos;
  /** Decode calls that were speculative steps (the rest: one token each). */
  public int speculativeCalls;
  /** Under {@link AdaptiveSpeculation}: its switches between steps and single tokens, with their reasons. */
  public List<String> adaptiveEvents = new ArrayList<>();

  public int decodeCalls() {
    return tokensPerCall.size();
  }

  /** Tokens produced by decode calls (the first completion token comes from the prefill). */
  public int decodeTokens() {
    int n = 0;
    for (int t : tokensPerCall) n += t;
    return n;
  }

  public double meanAccepted() {
    return tokensPerCall.isEmpty() ? 0.0 : (double) decodeTokens() / tokensPerCall.size();
  }

  public double decodeTokensPerSecond() {
    return decodeNanos > 0 ? decodeTokens() / (decodeNanos / 1e9) : 0.0;
  }
}
