"""Runs compared: `dsakit pr-check` (`pr_check`: base vs PR per device), `dsakit compare` (`pr_vs_base`)
and the plugin that records each outcome for it (`recorder`), the PR-comment markdown (`markdown`) and
`dsakit report merge` (`report_merge`: the fleet table)."""
