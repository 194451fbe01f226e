"""Other frameworks' words for hybridrl's keys: verl's key table, scripts and defaults, the tutorial, TRL and
Hydra words, and the "did you mean" suggestions. config/loader.py asks them about a key it does not know. They
hold no schema and no planning, and import nothing of config/ (a schema fact they need is passed in)."""
