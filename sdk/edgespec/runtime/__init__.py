"""Host runtimes over a `.pte`: program loading, sampling and decode loops."""
