"""The three ways a rollout group moves from its stable revisions to its targets, each a module
with the same entry, `run(driver) -> outcome`: `canary` (the step machine), `bluegreen` (surge the
whole new set, flip at once) and `rolling` (replace pods within a surge / unavailability budget).
`driver` says what they need from the run that drives them; `readiness` is what blue-green and
rolling share."""
