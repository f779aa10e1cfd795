"""`make bench`: the product's speed as ratios against its own floor, measured in one run (issue #8)."""
