"""TS-Guard (and the toy guard, which shares its output format): the exact tag
parser and composite score (``parser``); the guards are specs."""
