"""The control plane's HTTP routes: parse, call one service, shape the answer."""
