"""The book site: grids for the kernel-free explorers, the Sphinx build, page post-processing."""
