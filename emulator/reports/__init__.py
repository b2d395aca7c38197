"""What the user sees: the console, progress lines, the cluster diagram, the timeline, the metrics
chart and their colours."""
