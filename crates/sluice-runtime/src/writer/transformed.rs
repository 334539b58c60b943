//! A sink's own transforms, run by its writer on each write's events as
//! the sink reads them, chunk by chunk, so a spilled batch stays on disk.

use async_trait::async_trait;
use sluice_core::{Event, EventChunks, Position, SinkError};
use sluice_transform::{Transforms, Verdict};

pub(super) struct Transformed<'a> {
    inner: &'a mut dyn EventChunks,
    transforms: &'a Transforms,
    out: Vec<Event>,
}

impl<'a> Transformed<'a> {
    pub(super) fn new(inner: &'a mut dyn EventChunks, transforms: &'a Transforms) -> Self {
        Self { inner, transforms, out: Vec::new() }
    }
}

#[async_trait]
impl EventChunks for Transformed<'_> {
    async fn next_chunk(&mut self) -> Result<Option<&[Event]>, SinkError> {
        loop {
            let Some(chunk) = self.inner.next_chunk().await? else { return Ok(None) };
            self.out.clear();
            for event in chunk {
                let mut event = event.clone();
                match self.transforms.apply(&mut event) {
                    Ok(Verdict::Keep) => self.out.push(event),
                    Ok(Verdict::Drop) => {}
                    // The writer sends the event to the dead letter queue
                    // and writes the batch again without it.
                    Err(error) => {
                        return Err(SinkError::Rejected {
                            detail: format!("the sink's {error}"),
                            position: event.position.clone(),
                        });
                    }
                }
            }
            if !self.out.is_empty() {
                return Ok(Some(&self.out));
            }
        }
    }

    /// The batch's end, whatever the transforms dropped: the sink's
    /// position moves there all the same.
    fn last_position(&self) -> &Position {
        self.inner.last_position()
    }

    /// Before the transforms: an upper bound of what the sink gets.
    fn event_count(&self) -> usize {
        self.inner.event_count()
    }
}
