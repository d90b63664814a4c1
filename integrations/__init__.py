"""Framework integrations, shipped as ``dpplugins.integrations``.

Each module here imports its framework (Opacus, TensorFlow Privacy) lazily; the core package never
imports them.  (Integrations arrive with their own issues.)
"""
