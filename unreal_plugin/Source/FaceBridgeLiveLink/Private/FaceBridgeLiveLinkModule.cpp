// The module registers nothing by hand: the UCLASS factory is enough for Live Link to list the source.
#include "Modules/ModuleManager.h"

IMPLEMENT_MODULE(FDefaultModuleImpl, FaceBridgeLiveLink)
