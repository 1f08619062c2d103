"""Chapter 03's interactive tracing lab."""
