"""Cost: what a job is expected to cost (from measured throughput), its ETA while it runs, the
GPU-seconds it used, and per-tenant usage by day and job (docs/cost.md)."""
