"""The Kubernetes operator: reconciles AttributionRuns into Indexed Jobs. Never imports GPU code."""
