"""The NodePool controller: turns spec.targetNodes and accepted ScaleRequests into VMs and Nodes."""
