"""depthlab.watch inside the training loops of other libraries, as their callbacks.

    from depthlab.integrations.hf_trainer import DepthlabCallback          # Hugging Face transformers.Trainer
    from depthlab.integrations.lightning import DepthlabCallback   # Lightning (lightning or pytorch_lightning)

Each module subclasses its library's callback class, so it imports that library at its top: import
the one you use (``pip install 'depthlab[hf]'`` or ``'depthlab[lightning]'``). Nothing else in depthlab
imports them, and ``import depthlab`` imports neither library.
"""
