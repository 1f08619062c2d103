"""Chapter 02's interactive Jacobian viewer."""
