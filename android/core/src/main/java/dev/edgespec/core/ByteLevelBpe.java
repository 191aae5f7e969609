package dev.edgespec.core;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * GPT-2 style byte-level BPE over a Hugging Face {@code tokenizer.json} (the file the bundle
 * carries), reproducing what the Python {@code tokenizers} library does with that file: special
 * tokens matched first (leftmost-longest), optional individual-digit split (SmolLM2's
 * pre-tokenizer), the GPT-2 split, bytes mapped to printable code points, then merges applied by
 * rank exactly as {@code tokenizers}' BPE model does. Decoding maps code points back to bytes and
 * reads UTF-8 (invalid bytes become U+FFFD, as the Python tokenizer does).
 *
 * <p>The GPT-2 split is {@code 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+}
 * as the Python side's regex engine (Oniguruma) reads it, with Unicode classes: {@code \s} is
 * Unicode White_Space (NBSP, U+2009, U+3000, U+2028, NEL, ...). It is scanned by hand over the
 * classes in {@link UnicodeClasses} rather than run through java.util.regex, whose {@code \s} is
 * ASCII-only on OpenJDK (unless UNICODE_CHARACTER_CLASS, a flag Android rejects) and whose
 * {@code \p{L}}/{@code \p{N}} follow the platform's Unicode version.
 */
public final class ByteLevelBpe {
  private final Map<String, Integer> vocab = new HashMap<>();
  private final String[] idToToken;
  /** (left id, right id) -> {rank, merged id}; a later duplicate wins, as in tokenizers' map. */
  private final Map<Long, int[]> merges = new HashMap<>();
  private final Map<String, Integer> specials = new HashMap<>();
  private final Set<Integer> specialIds = new HashSet<>();
  private final Pattern specialPattern;
  private final boolean splitDigits;
  private final boolean ignoreMerges;
  private final boolean byteFallback;
  private final boolean fuseUnk;
  private final Integer unkId;
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
    for (String key : new String[] {"continuing_subword_prefix", "end_of_word_suffix"}) {
      Object v = model.get(key);
      if (v != null && !"".equals(v)) throw new IllegalArgumentException("tokenizer.json: model." + key + " is not supported (byte-level BPE has none)");
    }
    Object dropout = model.get("dropout");
    if (dropout instanceof Number && ((Number) dropout).doubleValue() > 0) throw new IllegalArgumentException("tokenizer.json: BPE dropout is not supported");
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
    List<Object> mergeList = Json.array(model.get("merges"), "model.merges");
    for (int r = 0; r < mergeList.size(); r++) {
      Object m = mergeList.get(r);
      String a, b;
      if (m instanceof String) {
        String line = (String) m;
        int sep = line.indexOf(' ');
        if (sep < 0) throw new IllegalArgumentException("tokenizer.json: merge " + r + " '" + line + "' is not 'a b'");
        a = line.substring(0, sep);
        b = line.substring(sep + 1);
      } else {
        List<Object> pair = Json.array(m, "merge");
        a = (String) pair.get(0);
        b = (String) pair.get(1);
      }
      Integer ia = vocab.get(a), ib = vocab.get(b), ic = vocab.get(a + b);
      if (ia == null || ib == null || ic == null) throw new IllegalArgumentException("tokenizer.json: merge " + r + " ('" + a + "', '" + b + "') uses a token that is not in the vocabulary");
      merges.put(pairKey(ia, ib), new int[] {r, ic});
    }
    ignoreMerges = Boolean.TRUE.equals(model.get("ignore_merges"));
    byteFallback = Boolean.TRUE.equals(model.get("byte_fallback"));
    fuseUnk = Boolean.TRUE.equals(model.get("fuse_unk"));
    Object unk = model.get("unk_token");
    unkId = unk == null ? null : vocab.get((String) unk);
    if (unk != null && unkId == null) throw new IllegalArgumentException("tokenizer.json: unk_token '" + unk + "' is not in the vocabulary");
    splitDigits = mentionsIndividualDigits(tj.get("pre_tokenizer"));
    // GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to 256, 257, ...
    int n = 0;
    for (int b = 0; b < 256; b++) {
      boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byteToChar[b] = printable ? (char) b : (char) (256 + n++);
      charToByte.put(byteToChar[b], b);
    }
  }

  private static long pairKey(int a, int b) {
    return ((long) a << 32) | (b & 0xFFFFFFFFL);
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
    for (String word : preTokenizedWords(text)) {
      for (int id : bpe(word)) out.add(id);
    }
  }

  /**
   * The pre-tokenizer's words of `text` (special tokens not looked for), in byte-level
   * characters: what {@code tokenizers}' {@code pre_tokenizer.pre_tokenize_str} gives.
   */
  List<String> preTokenizedWords(String text) {
    List<String> words = new ArrayList<>();
    if (text.isEmpty()) return words;
    for (String piece : splitDigits ? splitEachDigit(text) : List.of(text)) {
      for (String word : preTokenize(piece)) words.add(toByteChars(word));
    }
    return words;
  }

  private static final int LETTER = 0, NUMBER = 1, SPACE = 2, OTHER = 3;

  private static int kind(int cp) {
    if (UnicodeClasses.contains(UnicodeClasses.LETTER, cp)) return LETTER;
    if (UnicodeClasses.contains(UnicodeClasses.NUMBER, cp)) return NUMBER;
    if (UnicodeClasses.contains(UnicodeClasses.WHITE_SPACE, cp)) return SPACE;
    return OTHER;
  }

  /** End (exclusive) of the run of code points of kind `k` starting at `i`. */
  private static int run(String text, int i, int k) {
    while (i < text.length()) {
      int cp = text.codePointAt(i);
      if (kind(cp) != k) break;
      i += Character.charCount(cp);
    }
    return i;
  }

  /** The GPT-2 split of `text` (see the class comment), alternatives tried in the regex's order. */
  static List<String> preTokenize(String text) {
    List<String> words = new ArrayList<>();
    int i = 0, n = text.length();
    while (i < n) {
      int end = contraction(text, i);
      if (end < 0) {
        // ' ?\p{L}+' | ' ?\p{N}+' | ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one kind
        int j = text.charAt(i) == ' ' && i + 1 < n ? i + 1 : i;
        int k = kind(text.codePointAt(j));
        if (k != SPACE) {
          end = run(text, j, k);
        } else {
          // '\s+(?!\S)|\s+' from i: a whitespace run, less its last character when a non-space follows
          int stop = run(text, i, SPACE);
          end = stop < n && stop - i > 1 ? text.offsetByCodePoints(stop, -1) : stop;
        }
      }
      words.add(text.substring(i, end));
      i = end;
    }
    return words;
  }

  /** End of 's, 't, 're, 've, 'm, 'll or 'd at `i` (case-sensitive), or -1. */
  private static int contraction(String text, int i) {
    if (text.charAt(i) != '\'' || i + 1 >= text.length()) return -1;
    char c = text.charAt(i + 1);
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
    if (i + 2 < text.length()) {
      char d = text.charAt(i + 2);
      if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
    }
    return -1;
  }

  /** tokenizers' Digits(individual_digits): each char::is_numeric code point on its own. */
  private static List<String> splitEachDigit(String text) {
    List<String> parts = new ArrayList<>();
    int start = 0;
    for (int i = 0; i < text.length(); ) {
      int cp = text.codePointAt(i);
      int next = i + Character.charCount(cp);
      if (UnicodeClasses.contains(UnicodeClasses.NUMERIC, cp)) {
        if (i > start) parts.add(text.substring(start, i));
        parts.add(text.substring(i, next));
        start = next;
      }
      i = next;
    }
    if (start < text.length()) parts.add(text.substring(start));
    return parts;
  }

  private String toByteChars(String s) {
    StringBuilder b = new StringBuilder();
    for (byte x : s.getBytes(StandardCharsets.UTF_8)) b.append(byteToChar[x & 0xFF]);
    return b.toString();
  }

  /**
   * tokenizers' BPE on one pre-token: one symbol per character found in the vocabulary (a
   * character that is not, with no unk token and no byte fallback, is dropped, as tokenizers
   * does: SmolLM2's vocabulary lacks a few control bytes), then merges popped from a queue
   * ordered by (rank, position), each checked against the symbols still there.
   */
  private int[] bpe(String word) {
    int[] hit = cache.get(word);
    if (hit != null) return hit;
    if (ignoreMerges && vocab.containsKey(word)) return new int[] {vocab.get(word)};
    int[] c = new int[2 * word.length() + 4];
    int size = 0;
    Integer pendingUnk = null;
    for (int k = 0; k < word.length(); ) {
      int cp = word.codePointAt(k);
      String ch = new String(Character.toChars(cp));
      k += Character.charCount(cp);
      Integer id = vocab.get(ch);
      if (id != null) {
        if (pendingUnk != null) {
          c = grow(c, size);
          c[size++] = pendingUnk;
          pendingUnk = null;
        }
        c = grow(c, size);
        c[size++] = id;
        continue;
      }
      if (byteFallback) {
        byte[] raw = ch.getBytes(StandardCharsets.UTF_8);
        int[] fb = new int[raw.length];
        boolean all = true;
        for (int j = 0; j < raw.length && all; j++) {
          Integer f = vocab.get(String.format("<0x%02X>", raw[j] & 0xFF));
          if (f == null) all = false;
          else fb[j] = f;
        }
        if (all) {
          for (int f : fb) {
            c = grow(c, size);
            c[size++] = f;
          }
          continue;
        }
      }
      if (unkId != null) {
        if (pendingUnk != null && !fuseUnk) {
          c = grow(c, size);
          c[size++] = pendingUnk;
        }
        pendingUnk = unkId;
      }
    }
    if (pendingUnk != null) {
      c = grow(c, size);
      c[size++] = pendingUnk;
    }
    int[] ids = mergeAll(c, size);
    if (cache.size() < 100_000) cache.put(word, ids);
    return ids;
  }

  private static int[] grow(int[] a, int size) {
    return size < a.length ? a : Arrays.copyOf(a, 2 * a.length + 4);
  }

  /** tokenizers' Word::merge_all (models/bpe/word.rs), without dropout. */
  private int[] mergeAll(int[] c, int n) {
    int[] prev = new int[n], next = new int[n];
    boolean[] gone = new boolean[n];
    for (int k = 0; k < n; k++) {
      prev[k] = k - 1;
      next[k] = k + 1 < n ? k + 1 : -1;
    }
    // entries {rank, pos, new id}: lowest rank first, then leftmost
    PriorityQueue<int[]> queue = new PriorityQueue<>((x, y) -> x[0] != y[0] ? Integer.compare(x[0], y[0]) : Integer.compare(x[1], y[1]));
    for (int k = 0; k + 1 < n; k++) {
      int[] m = merges.get(pairKey(c[k], c[k + 1]));
      if (m != null) queue.add(new int[] {m[0], k, m[1]});
    }
    while (!queue.isEmpty()) {
      int[] top = queue.poll();
      int pos = top[1];
      if (gone[pos] || next[pos] == -1) continue;
      int right = next[pos];
      int[] now = merges.get(pairKey(c[pos], c[right]));
      if (now == null || now[1] != top[2]) continue; // an expired entry
      c[pos] = top[2];
      gone[right] = true;
      next[pos] = next[right];
      if (next[right] != -1) prev[next[right]] = pos;
      if (prev[pos] >= 0) {
        int[] m = merges.get(pairKey(c[prev[pos]], c[pos]));
        if (m != null) queue.add(new int[] {m[0], prev[pos], m[1]});
      }
      if (next[pos] != -1) {
        int[] m = merges.get(pairKey(c[pos], c[next[pos]]));
        if (m != null) queue.add(new int[] {m[0], pos, m[1]});
      }
    }
    int kept = 0;
    for (int k = 0; k < n; k++) if (!gone[k]) kept++;
    int[] ids = new int[kept];
    for (int k = 0, j = 0; k < n; k++) if (!gone[k]) ids[j++] = c[k];
    return ids;
  }

  /**
   * Text of `ids`; special tokens are left out when skipSpecial. As tokenizers' ByteLevel
   * decoder: a token whose characters all map to bytes gives those bytes, any other token its
   * own UTF-8; the bytes are then read as UTF-8.
   */
  public String decode(List<Integer> ids, boolean skipSpecial) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    for (int id : ids) {
      if (id < 0 || id >= idToToken.length || idToToken[id] == null) continue;
      if (skipSpecial && specialIds.contains(id)) continue;
      String tok = idToToken[id];
      byte[] mapped = new byte[tok.length()];
      boolean all = true;
      for (int k = 0; k < tok.length() && all; k++) {
        Integer b = charToByte.get(tok.charAt(k));
        if (b == null) all = false;
        else mapped[k] = (byte) (int) b;
      }
      byte[] raw = all ? mapped : tok.getBytes(StandardCharsets.UTF_8);
      bytes.write(raw, 0, raw.length);
    }
    return utf8Lossy(bytes.toByteArray());
  }

  /**
   * UTF-8 with each maximal ill-formed subpart replaced by one U+FFFD (Unicode's recommended
   * practice, which Rust's from_utf8_lossy follows; OpenJDK's decoder replaces some of them,
   * such as an encoded surrogate ED A0..BF, differently).
   */
  static String utf8Lossy(byte[] b) {
    StringBuilder out = new StringBuilder(b.length);
    int i = 0;
    while (i < b.length) {
      int b0 = b[i] & 0xFF;
      if (b0 < 0x80) {
        out.append((char) b0);
        i++;
        continue;
      }
      int need, lo = 0x80, hi = 0xBF, cp;
      if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        cp = b0 & 0x1F;
      } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
      } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
      } else {
        out.append('\uFFFD');
        i++;
        continue;
      }
      int j = i + 1;
      for (int k = 0; k < need; k++, j++) {
        int x = j < b.length ? b[j] & 0xFF : -1;
        if (x < (k == 0 ? lo : 0x80) || x > (k == 0 ? hi : 0xBF)) break;
        cp = (cp << 6) | (x & 0x3F);
      }
      if (j - i == need + 1) out.appendCodePoint(cp);
      else out.append('\uFFFD');
      i = j;
    }
    return out.toString();
  }

  public String decode(List<Integer> ids) {
    return decode(ids, true);
  }
}
