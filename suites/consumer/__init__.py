"""Consumer profile: a gateway running intelligent_route, judged through its real HTTP surface."""
