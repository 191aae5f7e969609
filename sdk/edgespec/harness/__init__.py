"""Host validation harness: task suites, metrics, side-by-side speed, gates, reports."""
