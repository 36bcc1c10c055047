"""The pipeline's stages as functions (one per DVC stage), the checks that an upstream output
is current, and the files a build leaves. DVC's stages and every sweep job call these."""
