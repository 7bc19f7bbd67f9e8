"""The eight-layer ReLU stack: its cases, float64 model, rounding and kinks, HVP oracle, localization."""
