package dev.edgespec.core;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Suffix matching over the prompt and the text generated so far, as a draft source: the same
 * algorithm as edgespec.speculative.suffix. An online suffix automaton of the token sequence;
 * {@link #extend} adds one token in amortized O(1) and keeps, alongside, the longest suffix of
 * the whole sequence that also occurs ending earlier. What followed its first occurrence is
 * the draft ({@link #draft}).
 */
public final class SuffixMatcher {
  private final List<Long> text = new ArrayList<>();
  private final List<Map<Long, Integer>> next = new ArrayList<>();
  private final List<Integer> link = new ArrayList<>();
  private final List<Integer> length = new ArrayList<>();
  private final List<Integer> first = new ArrayList<>(); // end position of the first occurrence
  private int last = 0; // state of the whole text
  private int match = 0, matchLen = 0; // longest suffix that also ends earlier

  public SuffixMatcher(List<Long> tokens) {
    newState(0, -1, new HashMap<>(), -1);
    for (long t : tokens) extend(t);
  }

  private int newState(int len, int firstEnd, Map<Long, Integer> nxt, int lnk) {
    next.add(nxt);
    link.add(lnk);
    length.add(len);
    first.add(firstEnd);
    return length.size() - 1;
  }

  /** Appends one token. */
  public void extend(long token) {
    // 1. the match: walk the automaton of the text so far (every occurrence ends earlier)
    int s = match, n = matchLen;
    while (s > 0 && !next.get(s).containsKey(token)) {
      s = link.get(s);
      n = length.get(s);
    }
    if (next.get(s).containsKey(token)) {
      s = next.get(s).get(token);
      n = n + 1;
    } else {
      s = 0;
      n = 0;
    }
    // 2. the automaton (standard online construction)
    int i = text.size();
    text.add(token);
    int cur = newState(length.get(last) + 1, i, new HashMap<>(), -1);
    int p = last;
    while (p >= 0 && !next.get(p).containsKey(token)) {
      next.get(p).put(token, cur);
      p = link.get(p);
    }
    if (p < 0) {
      link.set(cur, 0);
    } else {
      int q = next.get(p).get(token);
      if (length.get(p) + 1 == length.get(q)) {
        link.set(cur, q);
      } else {
        int clone = newState(length.get(p) + 1, first.get(q), new HashMap<>(next.get(q)), link.get(q));
        while (p >= 0 && Integer.valueOf(q).equals(next.get(p).get(token))) {
          next.get(p).put(token, clone);
          p = link.get(p);
        }
        link.set(q, clone);
        link.set(cur, clone);
      }
    }
    last = cur;
    // a split may have put a shorter state between the match's state and its link
    while (s > 0 && length.get(link.get(s)) >= n) s = link.get(s);
    match = s;
    matchLen = n;
  }

  /** Length of the longest suffix that also occurs ending earlier. */
  public int matchLength() {
    return matchLen;
  }

  /**
   * Up to {@code maxLen} tokens that followed the first earlier occurrence of the longest
   * matched suffix; empty when the match is shorter than {@code minMatch} (or there is none).
   */
  public long[] draft(int maxLen, int minMatch) {
    if (matchLen < minMatch || matchLen == 0) return new long[0];
    int start = first.get(match) + 1;
    int end = Math.min(text.size(), start + maxLen);
    long[] out = new long[Math.max(0, end - start)];
    for (int j = 0; j < out.length; j++) out[j] = text.get(start + j);
    return out;
  }
}
