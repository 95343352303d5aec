"""Read-only looks at the planner's decisions: explain one pod, plan the whole cluster
without acting, and snapshots of what the planner read, to replay offline."""
