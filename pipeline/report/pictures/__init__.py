"""Pictures: the graph (Graphviz dot or built-in SVG) and SVG charts."""
