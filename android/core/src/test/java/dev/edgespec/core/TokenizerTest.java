package dev.edgespec.core;

import static org.junit.Assert.assertEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.Test;

public class TokenizerTest {
  private static List<Integer> ints(Object v) {
    List<Integer> out = new ArrayList<>();
    for (Object o : Json.array(v, "ids")) out.add(((Number) o).intValue());
    return out;
  }

  @Test
  public void encodeAndDecodeMatchThePythonTokenizer() throws Exception {
    ByteLevelBpe tk = ByteLevelBpe.fromFile(Fixtures.file("tokenizer.json"));
    List<Object> cases = Json.array(Fixtures.json("tokenizer_cases.json"), "cases");
    for (Object o : cases) {
      Map<String, Object> c = Json.object(o, "case");
      String text = (String) c.get("text");
      assertEquals("pre-tokenize " + text, c.get("pieces"), tk.preTokenizedWords(text));
      assertEquals("encode " + text, ints(c.get("ids")), tk.encode(text));
      assertEquals("decode " + text, c.get("decoded"), tk.decode(ints(c.get("ids")), true));
      assertEquals("decode with specials " + text, c.get("decoded_all"), tk.decode(ints(c.get("ids")), false));
    }
  }

  @Test
  public void chatFormatMatchesTheModelsTemplate() throws Exception {
    for (Object o : Json.array(Fixtures.json("chat_cases.json"), "cases")) {
      Map<String, Object> c = Json.object(o, "case");
      assertEquals(c.get("text"), ChatFormat.smollm2((String) c.get("user")));
    }
  }
}
