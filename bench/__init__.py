"""jingpai benchmarks: each prints its numbers and ratios against a baseline measured in the same run."""
