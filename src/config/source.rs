//! Reading the configuration repository: the committed tree of a git ref, or
//! the files on disk, filtered by `.dovetailignore`.
