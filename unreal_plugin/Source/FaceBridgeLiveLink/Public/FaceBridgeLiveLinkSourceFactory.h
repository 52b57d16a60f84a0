// Adds "FaceBridge" to the Live Link panel's Add Source menu, with a panel for address, token and subjects;
// presets and Blueprint/Python re-create the source from its connection string
// ("address=127.0.0.1:50051;subjects=Anna;token=...", facebridge::ParseConnectionString).
#pragma once

#include "CoreMinimal.h"
#include "LiveLinkSourceFactory.h"

#include "FaceBridgeLiveLinkSourceFactory.generated.h"

UCLASS()
class FACEBRIDGELIVELINK_API UFaceBridgeLiveLinkSourceFactory : public ULiveLinkSourceFactory
{
	GENERATED_BODY()

public:
	virtual FText GetSourceDisplayName() const override;
	virtual FText GetSourceTooltip() const override;
	virtual EMenuType GetMenuType() const override { return EMenuType::SubPanel; }
	virtual TSharedPtr<SWidget> BuildCreationPanel(FOnLiveLinkSourceCreated OnLiveLinkSourceCreated) const override;
	virtual TSharedPtr<ILiveLinkSource> CreateSource(const FString& ConnectionString) const override;
};
