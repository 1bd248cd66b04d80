"""The science read off a record: convergence of a validation curve, a load curve's capacity
(n90, n50, the verdict) and the capacity law's fit. Pure functions of numbers."""
