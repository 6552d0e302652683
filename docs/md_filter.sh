#!/bin/sh
# Doxygen's FILTER_PATTERNS for docs/*.md: a heading's GitHub anchor
# `## Title <a id="name"></a>` becomes doxygen's `## Title {#name}`, so that the
# pages' [text](#name) links resolve in the reference as they do on GitHub.
exec sed -E 's/^(#+ .*[^ ]) *<a id="([^"]+)"><\/a> *$/\1 {#\2}/' "$1"
