"""Attribution maths: coalition games from outcome records, exact indices by O(n 2^n) transforms,
analytic and bootstrap intervals, and the Maximum Sample Reuse estimator. See docs/attribution.md.

- `games`: coalition bitmasks (players in spec order) and game files
- `transforms`: Moebius, Banzhaf values/interactions, Shapley values/interactions
- `values`: outcome records -> counts behind v(S) per arm, metric, generation and pooled
- `intervals`: variance tables, the t-interval over units (MSR), Holm, the cluster bootstrap
- `contrast`: the intervals from outcomes: each index a contrast of two mean rates, on their logit scale
- `msr`: Maximum Sample Reuse for sampled coalitions
- `report`: the JSON-able result (`AttributionResult`, `game_indices`)
"""
