"""Pure algorithm math: tensors in, tensors out; no config objects, no I/O."""
