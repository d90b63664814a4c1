"""Framework integrations, shipped as ``dpplugins.integrations``.

``opacus`` (PrivacyEngine accountants, samplers as data loaders, DPDDP), ``tf_privacy`` /
``dp_accountants`` / ``dp_accounting_events`` (dp_accounting and TensorFlow Privacy),
``tf_keras`` (Keras callback and tf.data samplers), ``flower`` (federated check-ins), ``pnsgd``
(projected noisy SGD for PyTorch).  Each module imports its framework lazily; the core package
never imports them.
"""
