"""The store: what specguard keeps on disk, written all or nothing.

`baseline_file` (the JSON format of one configuration's baseline file: stored sessions, runs,
fingerprints, validation), `baselines` (the store of a baselines directory: read a cell's
history, record sessions), `refresh` (one `--update-baselines` invocation's writes, staged and
committed together, and what it did, as data), `gaps` (why a cell has no stored session to
compare with, as data), `locks` (the per-file locks, outside the baselines directory) and
`atomic` (every JSON file specguard writes: temp file, fsync, rename, signals deferred).
Nothing here decides or words anything: decide/ decides, report/ renders the sentences.
"""
