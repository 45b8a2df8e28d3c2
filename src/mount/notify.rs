//! Invalidations the daemon sends the kernel (FUSE notifications, fuser's `Notifier`), so that
//! the newest version's attributes can be cached (docs/MOUNT.md "Reading"):
//!
//! - a thread (`log-watch`) blocks on an inotify watch of `_delta_log/` of its own
//!   ([`crate::log::watch::LogWaiter`]) and, at every change (a commit by this daemon or by any
//!   other process), asks the view which versions the kernel may still hold as the newest
//!   ([`TableView::stale_newest`]);
//! - a thread (`invalidate`) sends each of their inodes' invalidation (`FUSE_NOTIFY_INVAL_INODE`
//!   with a negative offset: the attributes only, no page of the cache, which stays true since a
//!   version's bytes never change), and those queued by request handlers ([`Invalidator::inode`]:
//!   the release of an edit).
//!
//! Never from a request handler: the kernel may hold locks of the inode a notification names
//! while it waits for the reply of a request on it, so a notification sent by the thread that
//! must answer that request can deadlock (libfuse's `fuse_lowlevel_notify_inval_inode`
//! documentation). The threads here answer no request.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use fuser::{INodeNo, Notifier};
use log::{debug, info, warn};

use super::view::TableView;
use crate::log::watch::LogWaiter;
use crate::util::sync::lock;

/// Sends the kernel the invalidations of attributes the mount let it cache.
#[derive(Debug)]
pub struct Invalidator {
    view: Arc<TableView>,
    /// The queue of the `invalidate` thread, once started.
    tx: Mutex<Option<mpsc::Sender<u64>>>,
}

impl Invalidator {
    /// An invalidator for `view`'s inodes; it sends nothing until [`Invalidator::start`].
    pub fn new(view: Arc<TableView>) -> Invalidator {
        Invalidator {
            view,
            tx: Mutex::new(None),
        }
    }

    /// Queue the invalidation of inode `ino`'s attributes (nothing before the start). Safe from
    /// a request handler: the notification is sent by another thread.
    pub fn inode(&self, ino: u64) {
        if let Some(tx) = lock(&self.tx).as_ref() {
            let _ = tx.send(ino);
        }
    }

    /// Start the `invalidate` thread, which sends through `notifier` (the session's), and, when
    /// `_delta_log/` is watched with inotify ([`crate::table::Table::log_watched`]), the
    /// `log-watch` thread; only then are the newest version's attributes answered with a TTL
    /// ([`TableView::cache_newest`]). Failures are logged: the attributes then keep TTL 0.
    pub fn start(&self, notifier: Notifier) {
        let (tx, rx) = mpsc::channel::<u64>();
        let sent = std::thread::Builder::new().name("invalidate".into()).spawn(move || {
            for ino in rx {
                match notifier.inval_inode(INodeNo(ino), -1, 0) {
                    // (Said after the kernel took it: tests wait for this line.)
                    Ok(()) => debug!("invalidated the attributes of inode {ino:#x} in the kernel"),
                    // The connection is gone (unmounted): nothing is cached any more.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::ENOTCONN)) => break,
                    Err(e) => warn!("cannot invalidate the attributes of inode {ino:#x} in the kernel: {e}"),
                }
            }
        });
        if let Err(e) = sent {
            info!("the newest version's attributes are not cached (no invalidation thread: {e})");
            return;
        }
        *lock(&self.tx) = Some(tx.clone());
        let table = self.view.table();
        if !table.log_watched() {
            info!("the newest version's attributes are not cached: _delta_log/ is not watched with inotify");
            return;
        }
        let waiter = match LogWaiter::start(table.log_dir_handle()) {
            Ok(w) => w,
            Err(why) => {
                info!("the newest version's attributes are not cached: {why}");
                return;
            }
        };
        // The watch exists before the first answer with a TTL: every commit after that answer
        // wakes the watcher.
        self.view.cache_newest(true);
        let view = self.view.clone();
        let watching = std::thread::Builder::new().name("log-watch".into()).spawn(move || {
            loop {
                let alive = waiter.wait();
                if !alive {
                    view.cache_newest(false);
                }
                for ino in view.stale_newest() {
                    if tx.send(ino).is_err() {
                        return;
                    }
                }
                if !alive {
                    info!("the watch of _delta_log/ ended: the newest version's attributes have TTL 0 from now on");
                    return;
                }
            }
        });
        if let Err(e) = watching {
            self.view.cache_newest(false);
            for ino in self.view.stale_newest() {
                self.inode(ino);
            }
            info!("the newest version's attributes are not cached (no watcher thread: {e})");
        }
    }
}
