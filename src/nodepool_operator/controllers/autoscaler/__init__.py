"""The Autoscaler controller: turns unschedulable Pods into ScaleRequests."""
