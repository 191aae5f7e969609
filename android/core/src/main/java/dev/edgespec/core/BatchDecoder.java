package dev.edgespec.core;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * Many prompts decoded together through a program's batched method, the same schedule as
 * edgespec.runtime.batch_decode: every call carries the next token of each running sequence
 * and, in the rows it has left ({@code callRows}), prompt chunks of sequences that took a free
 * slot; a sequence that ends (EOS or its budget) frees its slot for the next prompt at once; a
 * slot's next prompt prefills only where it differs from what the slot's cache holds. Each
 * sequence gets the tokens it gets alone ({@link Decoder#generate}): the program's rows are
 * their own, and each sequence samples with its own generator (seed + its index).
 */
public final class BatchDecoder {
  private BatchDecoder() {}

  private static final class Running {
    final int index;
    final List<Long> prompt;
    final Generation g = new Generation();
    final Random rng;
    final int budget;
    long[] feed; // tokens the sequence asks to feed next, at feedPos..
    long feedPos;
    int fed;
    boolean prefilled; // its prompt is in the cache: each answer after is a decode call

    Running(int index, List<Long> prompt, int budget, long seed, int reuse) {
      this.index = index;
      this.prompt = prompt;
      this.budget = budget;
      this.rng = new Random(seed + index);
      feed = new long[prompt.size() - reuse];
      for (int i = reuse; i < prompt.size(); i++) feed[i - reuse] = prompt.get(i);
      feedPos = reuse;
    }
  }

  /**
   * Decode every prompt, up to {@code slots} at a time (at most the model's batch slots), at most
   * {@code callRows} rows per call (the program's prefill chunk plus its slots); the generations
   * in the prompts' order.
   */
  public static List<Generation> generate(LanguageModel m, List<List<Long>> prompts, int slots, int callRows, int maxNewTokens, float temperature, long seed) {
    if (slots > m.batchSlots()) throw new IllegalArgumentException("the program decodes at most " + m.batchSlots() + " sequences at once, not " + slots);
    if (callRows < slots) throw new IllegalArgumentException("a call of " + callRows + " rows cannot carry a token of each of " + slots + " slots");
    List<Generation> out = new ArrayList<>();
    for (int i = 0; i < prompts.size(); i++) {
      Decoder.checkPrompt(prompts.get(i), m.maxSeqLen(), 0);
      out.add(null);
    }
    List<List<Long>> held = new ArrayList<>(); // per slot: the tokens its cache holds
    Map<Integer, Running> running = new LinkedHashMap<>(); // slot -> sequence, in the order they started
    int next = 0;
    for (int s = 0; s < slots && next < prompts.size(); s++, next++) {
      held.add(new ArrayList<>());
      running.put(s, start(m, prompts.get(next), next, held.get(s), maxNewTokens, seed));
    }
    while (!running.isEmpty()) {
      List<Long> rows = new ArrayList<>(), slotOf = new ArrayList<>(), posOf = new ArrayList<>(), emit = new ArrayList<>();
      List<Integer> answered = new ArrayList<>();
      int budget = callRows;
      for (Running r : running.values()) if (r.feed.length - r.fed == 1) budget--;
      // one row per sequence past its prompt, then prompt chunks in the rows left (a stable order)
      for (int pass = 0; pass < 2; pass++) {
        for (Map.Entry<Integer, Running> e : running.entrySet()) {
          Running r = e.getValue();
          int left = r.feed.length - r.fed;
          if ((left > 1) != (pass == 1)) continue;
          int take = left == 1 ? 1 : Math.min(left, budget);
          if (take <= 0) continue;
          if (left > 1) budget -= take;
          for (int i = 0; i < take; i++) {
            rows.add(r.feed[r.fed + i]);
            slotOf.add((long) e.getKey());
            posOf.add(r.feedPos + r.fed + i);
          }
          r.fed += take;
          if (r.fed == r.feed.length) {
            emit.add((long) rows.size() - 1);
            answered.add(e.getKey());
          }
        }
      }
      long[] emitRows = emit.isEmpty() ? new long[] {rows.size() - 1} : toArray(emit); // prompt chunks only: one row, unused
      float[][] logits = m.decodeRows(toArray(rows), toArray(slotOf), toArray(posOf), emitRows);
      for (int a = 0; a < answered.size(); a++) {
        int slot = answered.get(a);
        Running r = running.get(slot);
        long tok = Sampler.sample(logits[a], temperature, r.rng);
        long pos = r.feedPos + r.feed.length; // where the next token goes
        boolean eos = false;
        for (long x : m.eosIds()) eos |= x == tok;
        if (r.prefilled) r.g.tokensPerCall.add(1);
        r.prefilled = true;
        if (eos) r.g.stoppedByEos = true;
        else r.g.completion.add(tok);
        if (eos || r.g.completion.size() >= r.budget || pos >= m.maxSeqLen()) {
          List<Long> cache = held.get(slot); // what was fed: the context before position pos
          cache.clear();
          cache.addAll(r.prompt);
          cache.addAll(r.g.completion);
          cache.subList((int) pos, cache.size()).clear();
          out.set(r.index, r.g);
          running.remove(slot);
          if (next < prompts.size()) {
            running.put(slot, start(m, prompts.get(next), next, cache, maxNewTokens, seed));
            next++;
          }
        } else {
          r.feed = new long[] {tok};
          r.feedPos = pos;
          r.fed = 0;
        }
      }
    }
    return out;
  }

  private static Running start(LanguageModel m, List<Long> prompt, int index, List<Long> held, int maxNewTokens, long seed) {
    int reuse = 0; // the prompt's common prefix with what the slot holds, one token left to feed
    while (reuse < held.size() && reuse < prompt.size() && held.get(reuse).equals(prompt.get(reuse))) reuse++;
    reuse = Math.min(reuse, prompt.size() - 1);
    return new Running(index, prompt, Math.min(maxNewTokens, m.maxSeqLen() - prompt.size()), seed, reuse);
  }

  private static long[] toArray(List<Long> xs) {
    long[] a = new long[xs.size()];
    for (int i = 0; i < a.length; i++) a[i] = xs.get(i);
    return a;
  }
}
