//! irqsim
