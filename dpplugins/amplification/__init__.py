"""Privacy amplification theorems as pure functions, one module per paper family."""
