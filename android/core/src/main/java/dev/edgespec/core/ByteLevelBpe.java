package dev.edgespec.core;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * GPT-2 style byte-level BPE over a Hugging Face {@code tokenizer.json} (the file the bundle
 * carries): special tokens matched first, optional individual-digit split (SmolLM2's
 * pre-tokenizer), the GPT-2 split regex, bytes mapped to printable code points, then merges
 * applied by rank. Decoding maps code points back to bytes and reads UTF-8 (invalid bytes become
 * U+FFFD, as the Python tokenizer does).
 */
public final class ByteLevelBpe {
  private static final Pattern GPT2 =
      Pattern.compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
  private static final Pattern DIGIT = Pattern.compile("\\p{N}");

  private final Map<String, Integer> vocab = new HashMap<>();
  private final String[] idToToken;
  private final Map<String, Integer> mergeRank = new HashMap<>();
  private final Map<String, Integer> specials = new HashMap<>();
  private final Set<Integer> specialIds = new HashSet<>();
  private final Pattern specialPattern;
  private final boolean splitDigits;
  private final boolean ignoreMerges;
  private final char[] byteToChar = new char[256];
  private final Map<Character, Integer> charToByte = new HashMap<>();
  private final Map<String, int[]> cache = new HashMap<>();

  public static ByteLevelBpe fromFile(File tokenizerJson) throws IOException {
    return fromJson(new String(Files.readAllBytes(tokenizerJson.toPath()), StandardCharsets.UTF_8));
  }

  public static ByteLevelBpe fromJson(String text) {
    return new ByteLevelBpe(Json.object(Json.parse(text), "tokenizer.json"));
  }

  private ByteLevelBpe(Map<String, Object> tj) {
    Map<String, Object> model = Json.object(tj.get("model"), "model");
    if (!"BPE".equals(model.get("type"))) throw new IllegalArgumentException("tokenizer.json: model.type " + model.get("type") + " is not supported (BPE only)");
    int maxId = -1;
    for (Map.Entry<String, Object> e : Json.object(model.get("vocab"), "model.vocab").entrySet()) {
      int id = ((Number) e.getValue()).intValue();
      vocab.put(e.getKey(), id);
      maxId = Math.max(maxId, id);
    }
    List<Object> added = tj.get("added_tokens") == null ? new ArrayList<>() : Json.array(tj.get("added_tokens"), "added_tokens");
    for (Object o : added) maxId = Math.max(maxId, ((Number) Json.object(o, "added_tokens[]").get("id")).intValue());
    idToToken = new String[maxId + 1];
    for (Map.Entry<String, Integer> e : vocab.entrySet()) idToToken[e.getValue()] = e.getKey();
    List<String> alternation = new ArrayList<>();
    for (Object o : added) {
      Map<String, Object> t = Json.object(o, "added_tokens[]");
      String content = (String) t.get("content");
      int id = ((Number) t.get("id")).intValue();
      idToToken[id] = content;
      specials.put(content, id);
      if (Boolean.TRUE.equals(t.get("special"))) specialIds.add(id);
      alternation.add(content);
    }
    alternation.sort((a, b) -> b.length() - a.length()); // longest match first
    StringBuilder sp = new StringBuilder();
    for (String s : alternation) sp.append(sp.length() == 0 ? "" : "|").append(Pattern.quote(s));
    specialPattern = alternation.isEmpty() ? null : Pattern.compile(sp.toString());
    List<Object> merges = Json.array(model.get("merges"), "model.merges");
    for (int r = 0; r < merges.size(); r++) {
      Object m = merges.get(r);
      String key = m instanceof String ? (String) m : Json.array(m, "merge").get(0) + " " + Json.array(m, "merge").get(1);
      mergeRank.putIfAbsent(key, r);
    }
    ignoreMerges = Boolean.TRUE.equals(model.get("ignore_merges"));
    splitDigits = mentionsIndividualDigits(tj.get("pre_tokenizer"));
    // GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to 256, 257, ...
    int n = 0;
    for (int b = 0; b < 256; b++) {
      boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byteToChar[b] = printable ? (char) b : (char) (256 + n++);
      charToByte.put(byteToChar[b], b);
    }
  }

  private static boolean mentionsIndividualDigits(Object pre) {
    if (pre instanceof Map) {
      Map<?, ?> m = (Map<?, ?>) pre;
      if ("Digits".equals(m.get("type")) && Boolean.TRUE.equals(m.get("individual_digits"))) return true;
      Object list = m.get("pretokenizers");
      if (list instanceof List) for (Object p : (List<?>) list) if (mentionsIndividualDigits(p)) return true;
    }
    return false;
  }

  public int vocabSize() {
    return idToToken.length;
  }

  /** Token ids of `text` (no BOS added; special-token text maps to its id). */
  public List<Integer> encode(String text) {
    List<Integer> out = new ArrayList<>();
    int start = 0;
    if (specialPattern != null) {
      Matcher m = specialPattern.matcher(text);
      while (m.find()) {
        encodeOrdinary(text.substring(start, m.start()), out);
        out.add(specials.get(m.group()));
        start = m.end();
      }
    }
    encodeOrdinary(text.substring(start), out);
    return out;
  }

  private void encodeOrdinary(String text, List<Integer> out) {
    if (text.isEmpty()) return;
    for (String piece : splitDigits ? splitEachDigit(text) : List.of(text)) {
      Matcher m = GPT2.matcher(piece);
      while (m.find()) {
        for (int id : bpe(toByteChars(m.group()))) out.add(id);
      }
    }
  }

  private static List<String> splitEachDigit(String text) {
    List<String> parts = new ArrayList<>();
    Matcher m = DIGIT.matcher(text);
    int start = 0;
    while (m.find()) {
      if (m.start() > start) parts.add(text.substring(start, m.start()));
      parts.add(m.group());
      start = m.end();
    }
    if (start < text.length()) parts.add(text.substring(start));
    return parts;
  }

  private String toByteChars(String s) {
    StringBuilder b = new StringBuilder();
    for (byte x : s.getBytes(StandardCharsets.UTF_8)) b.append(byteToChar[x & 0xFF]);
    return b.toString();
  }

  private int[] bpe(String word) {
    int[] hit = cache.get(word);
    if (hit != null) return hit;
    List<String> sym = new ArrayList<>();
    if (ignoreMerges && vocab.containsKey(word)) {
      sym.add(word);
    } else {
      word.codePoints().forEach(cp -> sym.add(new String(Character.toChars(cp))));
      while (sym.size() > 1) {
        int best = -1, bestRank = Integer.MAX_VALUE;
        for (int k = 0; k + 1 < sym.size(); k++) {
          Integer r = mergeRank.get(sym.get(k) + " " + sym.get(k + 1));
          if (r != null && r < bestRank) {
            bestRank = r;
            best = k;
          }
        }
        if (best < 0) break;
        // merge every occurrence of the best pair, left to right
        String a = sym.get(best), b = sym.get(best + 1);
        List<String> next = new ArrayList<>();
        for (int k = 0; k < sym.size(); k++) {
          if (k + 1 < sym.size() && sym.get(k).equals(a) && sym.get(k + 1).equals(b)) {
            next.add(a + b);
            k++;
          } else {
            next.add(sym.get(k));
          }
        }
        sym.clear();
        sym.addAll(next);
      }
    }
    int[] ids = new int[sym.size()];
    for (int k = 0; k < ids.length; k++) {
      Integer id = vocab.get(sym.get(k));
      if (id == null) throw new IllegalStateException("token '" + sym.get(k) + "' is not in the vocabulary (no byte fallback)");
      ids[k] = id;
    }
    if (cache.size() < 100_000) cache.put(word, ids);
    return ids;
  }

  /** Text of `ids`; special tokens are left out when skipSpecial. */
  public String decode(List<Integer> ids, boolean skipSpecial) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    for (int id : ids) {
      if (id < 0 || id >= idToToken.length || idToToken[id] == null) continue;
      if (skipSpecial && specialIds.contains(id)) continue;
      String tok = idToToken[id];
      if (specials.containsKey(tok)) {
        byte[] raw = tok.getBytes(StandardCharsets.UTF_8);
        bytes.write(raw, 0, raw.length);
        continue;
      }
      for (int k = 0; k < tok.length(); k++) {
        Integer b = charToByte.get(tok.charAt(k));
        if (b != null) bytes.write(b);
      }
    }
    return new String(bytes.toByteArray(), StandardCharsets.UTF_8);
  }

  public String decode(List<Integer> ids) {
    return decode(ids, true);
  }
}
