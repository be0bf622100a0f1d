"""The SGLang release under test: the release table and its feature probes (`table`), the source
index every scanner reads through (`source`), whether the release's own import chain loads here
(`import_chain`). Never imports SGLang to answer which release it is."""
