package dev.edgespec.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.fail;

import java.util.List;
import java.util.Map;
import org.junit.Test;

public class JsonTest {
  @Test
  public void parsesValues() {
    Map<String, Object> m = Json.object(Json.parse("{\"a\": [1, -2.5e1, true, null, \"x\\u00e9\\n\"], \"b\": {}}"), "m");
    List<Object> a = Json.array(m.get("a"), "a");
    assertEquals(1L, a.get(0));
    assertEquals(-25.0, (Double) a.get(1), 0.0);
    assertEquals(Boolean.TRUE, a.get(2));
    assertNull(a.get(3));
    assertEquals("x\u00e9\n", a.get(4));
    assertEquals(0, Json.object(m.get("b"), "b").size());
  }

  @Test
  public void rejectsMalformedText() {
    for (String bad : new String[] {"{", "[1,]", "{\"a\" 1}", "tru", "\"abc", "1 2"}) {
      try {
        Json.parse(bad);
        fail("accepted " + bad);
      } catch (IllegalArgumentException expected) {
        // ok
      }
    }
  }
}
