"""A fleet of llamay replicas on Ray Serve (the optional `llamay[fleet]` extra).

`spec` describes a fleet; `app` builds and runs it; `replica` is one full llamay app per Ray
Serve replica; `ingress` forwards each HTTP request to one of them, chosen by `router` (a Ray
`RequestRouter` over the pure policy in `routing`, fed by `hints`); `checkpoint` and
`recovery` keep contexts across replica deaths. Nothing here is imported by `llamay serve`."""
