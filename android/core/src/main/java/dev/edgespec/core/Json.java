package dev.edgespec.core;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small strict JSON reader (RFC 8259): objects become {@code Map<String, Object>} (insertion
 * order kept), arrays {@code List<Object>}, numbers {@code Long} when integral else {@code Double},
 * plus String, Boolean and null. Enough for manifest.json, tokenizer.json and test fixtures
 * without a dependency.
 */
public final class Json {
  private final String s;
  private int i;

  private Json(String s) {
    this.s = s;
  }

  public static Object parse(String text) {
    Json p = new Json(text);
    p.ws();
    Object v = p.value();
    p.ws();
    if (p.i != p.s.length()) throw p.error("trailing characters");
    return v;
  }

  @SuppressWarnings("unchecked")
  public static Map<String, Object> object(Object v, String what) {
    if (!(v instanceof Map)) throw new IllegalArgumentException(what + ": expected a JSON object");
    return (Map<String, Object>) v;
  }

  @SuppressWarnings("unchecked")
  public static List<Object> array(Object v, String what) {
    if (!(v instanceof List)) throw new IllegalArgumentException(what + ": expected a JSON array");
    return (List<Object>) v;
  }

  public static long[] longs(Object v, String what) {
    List<Object> a = array(v, what);
    long[] out = new long[a.size()];
    for (int k = 0; k < out.length; k++) out[k] = ((Number) a.get(k)).longValue();
    return out;
  }

  private IllegalArgumentException error(String msg) {
    return new IllegalArgumentException("invalid JSON at offset " + i + ": " + msg);
  }

  private void ws() {
    while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++;
  }

  private Object value() {
    if (i >= s.length()) throw error("unexpected end");
    char c = s.charAt(i);
    switch (c) {
      case '{':
        return obj();
      case '[':
        return arr();
      case '"':
        return str();
      case 't':
        return lit("true", Boolean.TRUE);
      case 'f':
        return lit("false", Boolean.FALSE);
      case 'n':
        return lit("null", null);
      default:
        return num();
    }
  }

  private Object lit(String word, Object v) {
    if (!s.startsWith(word, i)) throw error("unexpected token");
    i += word.length();
    return v;
  }

  private Map<String, Object> obj() {
    Map<String, Object> m = new LinkedHashMap<>();
    i++;
    ws();
    if (peek('}')) return m;
    while (true) {
      ws();
      if (i >= s.length() || s.charAt(i) != '"') throw error("expected a string key");
      String k = str();
      ws();
      expect(':');
      ws();
      m.put(k, value());
      ws();
      if (peek('}')) return m;
      expect(',');
    }
  }

  private List<Object> arr() {
    List<Object> a = new ArrayList<>();
    i++;
    ws();
    if (peek(']')) return a;
    while (true) {
      ws();
      a.add(value());
      ws();
      if (peek(']')) return a;
      expect(',');
    }
  }

  private boolean peek(char c) {
    if (i < s.length() && s.charAt(i) == c) {
      i++;
      return true;
    }
    return false;
  }

  private void expect(char c) {
    if (!peek(c)) throw error("expected '" + c + "'");
  }

  private String str() {
    StringBuilder b = new StringBuilder();
    i++; // opening quote
    while (true) {
      if (i >= s.length()) throw error("unterminated string");
      char c = s.charAt(i++);
      if (c == '"') return b.toString();
      if (c == '\\') {
        if (i >= s.length()) throw error("bad escape");
        char e = s.charAt(i++);
        switch (e) {
          case '"': b.append('"'); break;
          case '\\': b.append('\\'); break;
          case '/': b.append('/'); break;
          case 'b': b.append('\b'); break;
          case 'f': b.append('\f'); break;
          case 'n': b.append('\n'); break;
          case 'r': b.append('\r'); break;
          case 't': b.append('\t'); break;
          case 'u':
            if (i + 4 > s.length()) throw error("bad \\u escape");
            b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
            i += 4;
            break;
          default:
            throw error("bad escape \\" + e);
        }
      } else {
        if (c < 0x20) throw error("control character in string");
        b.append(c);
      }
    }
  }

  private Object num() {
    int start = i;
    if (peek('-')) {}
    while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
    boolean frac = false;
    if (i < s.length() && s.charAt(i) == '.') {
      frac = true;
      i++;
      while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
    }
    if (i < s.length() && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
      frac = true;
      i++;
      if (i < s.length() && (s.charAt(i) == '+' || s.charAt(i) == '-')) i++;
      while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
    }
    String t = s.substring(start, i);
    if (t.isEmpty() || t.equals("-")) throw error("unexpected character");
    try {
      return frac ? (Object) Double.parseDouble(t) : (Object) Long.parseLong(t);
    } catch (NumberFormatException e) {
      return Double.parseDouble(t); // an integer beyond long
    }
  }
}
